package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// Kill sends SIGKILL to the server (and any child it forked) and waits for
// it to exit, as in a crash. Killing a server that is not running does
// nothing.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		s.fatalf("redistest: kill %s %s: %v", s.kind, s.Addr(), err)
	}
}

// Stop shuts the server down gracefully with SIGTERM (which, with
// persistence off, is SHUTDOWN NOSAVE; a paused server is resumed so that it
// can exit) and waits for it to exit. When it has not exited after 15 s it
// is killed. Stopping a server that is not running does nothing.
func (s *Server) Stop() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	if !p.exited() {
		_ = signalProcess(p.pid, sigTerm)
		_ = signalGroup(p.pid, sigCont)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			s.t.Logf("redistest: %s %s still running %v after SIGTERM; killing it", s.kind, s.Addr(), stopTimeout)
		}
	}
	if err := s.killLocked(); err != nil {
		s.fatalf("redistest: stop %s %s: %v", s.kind, s.Addr(), err)
	}
}

// Pause freezes the server with SIGSTOP: it keeps its port, and the kernel
// still accepts connections, but no command is answered until Resume (a
// hung server, as opposed to a dead one). It returns once the process is
// stopped.
func (s *Server) Pause() {
	s.t.Helper()
	s.signalRunning(sigStop)
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	s.signalRunning(sigCont)
}

func (s *Server) signalRunning(sig signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		s.fatalf("redistest: %v to %s %s: it is not running", sig, s.kind, s.Addr())
	}
	if err := signalGroup(p.pid, sig); err != nil {
		s.fatalf("redistest: %v to %s %s: %v", sig, s.kind, s.Addr(), err)
	}
	if sig == sigStop {
		waitStopped(p.pid)
	}
	s.paused = sig == sigStop
}

// Restart starts the server again on the same port, with the same
// arguments, and waits until it answers PING. A running server is killed
// first. Its data set starts empty (persistence is off), but a cluster node
// keeps its nodes.conf, a replica its --replicaof and a sentinel its
// rewritten configuration. When the port is briefly still taken, Restart
// retries for up to 10 s.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		s.fatalf("redistest: restart %s %s: %v", s.kind, s.Addr(), err)
	}
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.launchLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			s.fatalf("redistest: restart %s on port %d: %v", s.kind, s.port, err)
		}
		time.Sleep(restartBackoff)
	}
}

// startFresh launches the server on a newly picked port, picking another
// when the port turns out to be taken.
func (s *Server) startFresh() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		port, err := s.pickPort()
		if err != nil {
			s.t.Fatalf("redistest: pick a port for %s: %v", s.kind, err)
		}
		s.port = port
		if s.prepare != nil {
			if err := s.prepare(port); err != nil {
				s.t.Fatalf("redistest: prepare %s: %v", s.kind, err)
			}
		}
		err = s.launchLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || attempt == maxPortAttempts {
			s.fatalf("redistest: start %s on port %d (attempt %d): %v", s.kind, port, attempt, err)
		}
	}
}

// launchLocked starts the process on s.port and waits until it is ready. On
// failure the process is gone, and the error wraps errAddrInUse when the
// server could not bind its port(s).
func (s *Server) launchLocked() error {
	logOff, outOff := fileSize(s.logPath), fileSize(s.outPath)
	out, err := os.OpenFile(s.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args(s.port)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	err = startCmd(cmd)
	_ = out.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc, s.paused = p, false

	err = s.waitReady(p)
	if err == nil {
		return nil
	}
	if errors.Is(err, errExited) &&
		(containsSince(s.logPath, logOff, addrInUseText) || containsSince(s.outPath, outOff, addrInUseText)) {
		err = fmt.Errorf("%w: %w", errAddrInUse, err)
	}
	if kerr := s.killLocked(); kerr != nil {
		err = fmt.Errorf("%w; then %w", err, kerr)
	}
	return err
}

// waitReady polls until the server on s.port is our process (its INFO
// process_id is p's pid: another program may have taken the port) and
// answers PING, until the process exits, or until startTimeout.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.probe(p.pid)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w before it was ready (%v)", errExited, p.err)
		case <-time.After(pollInterval):
		}
	}
}

func (s *Server) probe(pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	info, err := s.DoContext(ctx, "INFO", "server")
	if err != nil {
		return err
	}
	if got, _ := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("port %d is served by process %q, not ours (%d)", s.port, got, pid)
	}
	pong, err := s.DoContext(ctx, "PING")
	if err != nil {
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING replied %q", pong)
	}
	return nil
}

// killLocked kills the running process, if any, and waits for it and its
// process group.
func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc, s.paused = nil, false
	if !p.exited() {
		if err := signalGroup(p.pid, sigKill); err != nil {
			_ = p.cmd.Process.Kill()
		}
		select {
		case <-p.done:
		case <-time.After(killTimeout):
			return fmt.Errorf("process %d still running %v after SIGKILL", p.pid, killTimeout)
		}
	}
	waitGroupGone(p.pid, groupTimeout)
	return nil
}

func (s *Server) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		s.t.Errorf("redistest: cleanup of %s %s: %v\n%s", s.kind, s.Addr(), err, s.LogTail(logTailLines))
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the server's process is up and not paused.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.paused && !s.proc.exited()
}

package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bounds on the waits of the lifecycle helpers.
const (
	startTimeout    = 15 * time.Second      // a launched process answers PING
	restartTimeout  = 10 * time.Second      // Restart retries a port still in use
	stopTimeout     = 15 * time.Second      // SIGTERM to exit (Redis may wait up to 10 s for replicas)
	killTimeout     = 10 * time.Second      // SIGKILL to exit
	groupTimeout    = time.Second           // forked children to follow their server
	probeTimeout    = time.Second           // one readiness probe
	pollInterval    = 5 * time.Millisecond  // between readiness probes
	restartBackoff  = 50 * time.Millisecond // between Restart attempts
	maxPortAttempts = 5                     // fresh ports tried when bind fails
)

const (
	loopback       = "127.0.0.1"
	redisServerBin = "redis-server"
	redisCLIBin    = "redis-cli"
	serverLogName  = "redis.log"  // --logfile, in the server's directory
	processOutName = "stdout.log" // stdout and stderr, in the server's directory
	addrInUseText  = "Address already in use"
	busPortOffset  = 10000 // a cluster node's bus port is its port + 10000
	maxClusterPort = 65535 - busPortOffset
	logTailLines   = 30       // log lines quoted in failures
	logTailBytes   = 64 << 10 // log bytes read to find them
)

var (
	errExited    = errors.New("process exited")
	errAddrInUse = errors.New("port already in use")
)

// Option configures Start (and every data node of StartCluster and
// StartSentinel).
type Option func(*options)

type options struct {
	args []string
	tls  *tlsOptions
}

// WithArgs appends arguments to the redis-server command line, after the
// package's own, so they can also override them: WithArgs("--maxmemory",
// "10mb", "--maxmemory-policy", "allkeys-lru"). Each setting is a "--name"
// argument followed by its values as separate arguments.
func WithArgs(args ...string) Option {
	args = slices.Clone(args)
	return func(o *options) { o.args = append(o.args, args...) }
}

func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Server is one Redis process (a data node or a sentinel) owned by a test.
// Its port is fixed for its lifetime: Restart reuses it.
//
// The lifecycle methods (Kill, Stop, Pause, Resume, Restart) fail the test
// on error and must be called from the test's goroutine; they are
// serialised, so concurrent Do calls are fine. A stopped or killed server
// refuses connections until Restart.
type Server struct {
	t        testing.TB
	kind     string // in messages: "redis-server", "cluster node", "sentinel"
	bin      string
	dir      string
	logPath  string // the server's --logfile
	outPath  string // its stdout and stderr (errors before the log opens)
	args     func(port int) []string
	prepare  func(port int) error // before a launch on a newly picked port
	pickPort func() (int, error)
	port     int         // set by the first successful launch, then fixed
	client   *tls.Config // the TLS side of Do (WithTLS); nil for plain RESP

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool
}

type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has been waited for
	err  error         // the result of Wait, once done is closed
}

// serverSpec describes how to run one kind of server.
type serverSpec struct {
	kind     string
	args     func(s *Server, port int) []string
	prepare  func(s *Server, port int) error
	pickPort func() (int, error)
	client   *tls.Config // WithTLS
}

// Start starts a redis-server on a free port of 127.0.0.1, with persistence
// off (--save "" --appendonly no), diskless replication without delay and,
// on Redis 7 and later, the DEBUG command enabled. It returns once the
// server answers PING and kills it in t.Cleanup. It skips or fails the test
// as Require does when redis-server is missing, and fails it, quoting the
// server's log, when the server does not start within 15 s.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := applyOptions(opts)
	spec := dataSpec(redisServerBin, o.args)
	if o.tls != nil {
		spec = o.tls.spec(spec)
	}
	return startServer(t, spec)
}

// dataSpec runs a data node (not a sentinel) with extra arguments after the
// package's defaults.
func dataSpec(kind string, extra []string) serverSpec {
	return serverSpec{
		kind:     kind,
		args:     func(s *Server, port int) []string { return append(s.dataArgs(port), extra...) },
		pickPort: freePort,
	}
}

func startServer(t testing.TB, spec serverSpec) *Server {
	t.Helper()
	Require(t, redisServerBin)
	bin, err := exec.LookPath(redisServerBin)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	dir := t.TempDir()
	s := &Server{
		t:        t,
		kind:     spec.kind,
		bin:      bin,
		dir:      dir,
		logPath:  filepath.Join(dir, serverLogName),
		outPath:  filepath.Join(dir, processOutName),
		pickPort: spec.pickPort,
		client:   spec.client,
	}
	s.args = func(port int) []string { return spec.args(s, port) }
	if spec.prepare != nil {
		s.prepare = func(port int) error { return spec.prepare(s, port) }
	}
	// Registered before the launch so that a failed start is cleaned up too.
	// It runs before t.TempDir's removal, which was registered earlier.
	t.Cleanup(s.cleanup)
	s.startFresh()
	return s
}

// dataArgs are the command-line settings of every data node.
func (s *Server) dataArgs(port int) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", loopback,
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", s.logPath,
		"--save", "",
		"--appendonly", "no",
		"--repl-diskless-sync-delay", "0",
	}
	if serverVersion(s.bin).atLeast(7, 0) {
		args = append(args, "--enable-debug-command", "yes")
	}
	return args
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort(loopback, strconv.Itoa(s.port)) }

// Port returns the server's TCP port. The port stays the same across
// Restart.
func (s *Server) Port() int { return s.port }

// PID returns the process id of the running server, or 0 when it is not
// running (after Kill or Stop).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

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

// Do runs one command with a fresh connection and returns the reply as
// text: a status or bulk string as it is, an integer in decimal, an array as
// its elements' text one a line (nested arrays flattened, nil elements
// empty). It returns ErrNil for a nil reply and a ReplyError for an error
// reply. The whole exchange is bounded by DefaultTimeout; use DoContext for
// another bound, for example against a paused server.
func (s *Server) Do(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return s.DoContext(ctx, args...)
}

// DoContext is Do bounded by ctx (by DefaultTimeout if ctx has no
// deadline). When ctx ends first, the error wraps ctx.Err(), so that
// errors.Is(err, context.DeadlineExceeded) holds.
func (s *Server) DoContext(ctx context.Context, args ...string) (string, error) {
	v, err := s.DoValue(ctx, args...)
	if err != nil {
		return "", err
	}
	if v == nil {
		return "", ErrNil
	}
	return formatReply(v), nil
}

// DoValue is DoContext returning the reply as a value: a string (status or
// bulk), an int64, nil, or a []any of those (where an element can also be a
// ReplyError). An error reply is returned as a ReplyError error. It suits
// structured replies such as CLUSTER SLOTS or SENTINEL MASTER.
func (s *Server) DoValue(ctx context.Context, args ...string) (any, error) {
	return do(ctx, s.Addr(), s.client, args)
}

// LogTail returns the last lines of the server's log file and of its
// standard output and error, for failure messages.
func (s *Server) LogTail(lines int) string {
	var b strings.Builder
	for _, f := range []struct{ name, path string }{
		{"log", s.logPath},
		{"stdout/stderr", s.outPath},
	} {
		tail := tailLines(f.path, lines)
		if tail == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s %s %s (%s) ---\n%s\n", s.kind, s.Addr(), f.name, f.path, tail)
	}
	if b.Len() == 0 {
		return fmt.Sprintf("--- %s %s: no log output in %s ---", s.kind, s.Addr(), s.dir)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s *Server) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), s.LogTail(logTailLines))
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

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeClusterPort returns a free port p whose cluster bus port p+10000 is
// free too (so p <= 55535).
func freeClusterPort() (int, error) {
	var held []net.Listener // rejected ports, held so they are not offered again
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p > maxClusterPort {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(p+busPortOffset)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return p, nil
	}
	return 0, errors.New("no free port p with p+10000 free after 100 tries")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// containsSince reports whether the file contains text after offset off.
func containsSince(path string, off int64, text string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, off, 1<<30))
	return err == nil && bytes.Contains(b, []byte(text))
}

// tailLines returns the last n lines of a file (read from its last 64 KiB).
func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSize(path)
	off := max(0, size-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, off, size-off))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // a partial first line
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// version is a Redis release, major.minor.
type version struct{ major, minor int }

func (v version) atLeast(major, minor int) bool {
	return v.major > major || (v.major == major && v.minor >= minor)
}

var (
	versionMu    sync.Mutex
	versionCache = map[string]version{}
	versionRE    = regexp.MustCompile(`v=(\d+)\.(\d+)`)
)

// serverVersion returns the version of a redis-server binary, asking it once
// per binary, so that settings newer than the binary are left out. An
// unknown version is 0.0: only settings every release has are used.
func serverVersion(bin string) version {
	versionMu.Lock()
	defer versionMu.Unlock()
	if v, ok := versionCache[bin]; ok {
		return v
	}
	var v version
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if m := versionRE.FindSubmatch(out); err == nil && m != nil {
		v.major, _ = strconv.Atoi(string(m[1]))
		v.minor, _ = strconv.Atoi(string(m[2]))
	}
	versionCache[bin] = v
	return v
}

// running reports whether the server's process is up and not paused.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.paused && !s.proc.exited()
}

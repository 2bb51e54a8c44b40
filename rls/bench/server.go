package rlsbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server on a free port of 127.0.0.1, with
// persistence off, started by StartServer and killed by Close. (The
// internal/benchmarks module has the same helper; it is not imported so
// that its peers stay out of this module's go.mod.)
type Server struct {
	cmd *exec.Cmd
	dir string
	ctl *redis.Client
}

// StartServer starts redis-server from PATH and waits until it answers.
func StartServer() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (Debian: apt-get install redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "limitkit-rlsbench-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{dir: dir}
		s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		setProcAttr(s.cmd)
		if err := s.cmd.Start(); err != nil {
			lastErr = err
			continue
		}
		s.ctl = redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), PoolSize: 1, MaxRetries: -1})
		if lastErr = s.waitReady(10 * time.Second); lastErr == nil {
			return s, nil
		}
		s.kill()
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := s.ctl.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server not ready after %v: %w\n%s", timeout, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.ctl.Options().Addr }

// Version returns the server's redis_version, or "unknown".
func (s *Server) Version(ctx context.Context) string {
	info, err := s.ctl.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	if v, ok := infoField(info, "redis_version"); ok {
		return v
	}
	return "unknown"
}

// FlushAll empties the server (FLUSHALL SYNC).
func (s *Server) FlushAll(ctx context.Context) error {
	return s.ctl.Do(ctx, "FLUSHALL", "SYNC").Err()
}

// ResetStats runs CONFIG RESETSTAT.
func (s *Server) ResetStats(ctx context.Context) error {
	return s.ctl.ConfigResetStat(ctx).Err()
}

// controlCommands are sent by the harness and the clients' handshakes, not
// by a contender deciding.
var controlCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config": true, "ping": true, "hello": true,
	"client|setinfo": true, "client": true, "script|load": true, "script": true, "select": true,
}

// Commands returns the commands the server ran since the last ResetStats,
// control commands excluded, those run inside scripts included.
func (s *Server) Commands(ctx context.Context) (int64, error) {
	info, err := s.ctl.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if controlCommands[name] {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: line %q: %w", line, err)
		}
		n += c
	}
	return n, nil
}

// ProcCPU returns the CPU time the redis-server process has used, all
// threads, as the kernel charged it (Linux /proc, 10 ms resolution).
func (s *Server) ProcCPU() (time.Duration, error) { return procCPU(s.cmd.Process.Pid) }

// Close kills the server and removes its directory.
func (s *Server) Close() error {
	s.kill()
	return os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	if s.ctl != nil {
		_ = s.ctl.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func infoField(info, name string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

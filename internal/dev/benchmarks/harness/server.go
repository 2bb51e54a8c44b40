package harness

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
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
// persistence off, started by StartServer and killed by Close.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	port int
	ctl  *redis.Client
}

// StartServer starts redis-server (from PATH) on a free loopback port and
// waits until it answers PING. extraArgs are added to its command line
// (e.g. "--io-threads", "2").
func StartServer(extraArgs ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (on Debian/Ubuntu: apt-get install redis-server redis-tools): %w", err)
	}
	dir, err := os.MkdirTemp("", "limitkit-bench-")
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
		s := &Server{dir: dir, port: port}
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log")}, extraArgs...)
		s.cmd = exec.Command(bin, args...)
		setProcAttr(s.cmd)
		if err := s.cmd.Start(); err != nil {
			lastErr = err
			continue
		}
		s.ctl = redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1, MaxRetries: -1})
		if err := s.waitReady(10 * time.Second); err != nil {
			lastErr = err
			s.kill()
			continue
		}
		return s, nil
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
			return fmt.Errorf("redis-server on port %d not ready after %v: %v\n%s", s.port, timeout, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Version returns the server's redis_version.
func (s *Server) Version(ctx context.Context) string {
	info, err := s.ctl.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

// Client returns the server's control client (one connection): for tests
// and set-up, never for the load measured.
func (s *Server) Client() *redis.Client { return s.ctl }

// Do runs one control command (FLUSHALL, CONFIG RESETSTAT, SCRIPT LOAD, ...)
// and returns its reply.
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	return s.ctl.Do(ctx, args...).Result()
}

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

// CmdStat is one line of INFO commandstats.
type CmdStat struct {
	// Calls is the number of calls; Usec the microseconds the server
	// spent in them.
	Calls, Usec int64
}

// CommandStats returns INFO commandstats by command name ("evalsha",
// "incr", ...), since the last CONFIG RESETSTAT.
func (s *Server) CommandStats(ctx context.Context) (map[string]CmdStat, error) {
	info, err := s.ctl.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(info)
}

// ParseCommandStats parses the text of INFO commandstats.
func ParseCommandStats(info string) (map[string]CmdStat, error) {
	stats := map[string]CmdStat{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		var st CmdStat
		var err error
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, err = strconv.ParseInt(v, 10, 64)
			default:
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("commandstats: %q: %v", line, err)
			}
		}
		stats[name] = st
	}
	return stats, nil
}

// CPU returns the CPU time the server has used (INFO cpu: used_cpu_sys
// plus used_cpu_user), all threads included.
func (s *Server) CPU(ctx context.Context) (time.Duration, error) {
	info, err := s.ctl.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// ProcCPU returns the CPU time the redis-server process has used, read from
// /proc/PID/stat (Linux; 10 ms resolution): what the kernel charged it,
// independent of what Redis reports about itself.
func (s *Server) ProcCPU() (time.Duration, error) {
	return procCPU(s.cmd.Process.Pid)
}

// ResetStats runs CONFIG RESETSTAT.
func (s *Server) ResetStats(ctx context.Context) error {
	return s.ctl.ConfigResetStat(ctx).Err()
}

// FlushAll empties the server (FLUSHALL SYNC); loaded scripts stay.
func (s *Server) FlushAll(ctx context.Context) error {
	return s.ctl.Do(ctx, "FLUSHALL", "SYNC").Err()
}

// RedisBenchmark runs redis-benchmark against the server: requests
// commands from clients connections, pipeline commands per round trip,
// with __rand_int__ in args drawn from keyspace values (0: no -r), and
// returns the requests per second it reports.
func (s *Server) RedisBenchmark(ctx context.Context, clients, pipeline, requests, keyspace int, args ...string) (float64, error) {
	cmdArgs := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-c", strconv.Itoa(clients),
		"-n", strconv.Itoa(requests), "-P", strconv.Itoa(pipeline), "--csv"}
	if keyspace > 0 {
		cmdArgs = append(cmdArgs, "-r", strconv.Itoa(keyspace))
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := exec.CommandContext(ctx, "redis-benchmark", cmdArgs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("redis-benchmark %s: %v: %s", strings.Join(cmdArgs, " "), err, stderr.String())
	}
	return parseBenchmarkCSV(stdout.String())
}

// parseBenchmarkCSV reads the rps column of redis-benchmark --csv output.
func parseBenchmarkCSV(out string) (float64, error) {
	records, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark output %q: %v", out, err)
	}
	col := 1
	for _, rec := range records {
		if len(rec) > 1 && rec[0] == "test" {
			for i, h := range rec {
				if h == "rps" {
					col = i
				}
			}
			continue
		}
		if len(rec) > col {
			return strconv.ParseFloat(rec[col], 64)
		}
	}
	return 0, errors.New("redis-benchmark printed no result: " + out)
}

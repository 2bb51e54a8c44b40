package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
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

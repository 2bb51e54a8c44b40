package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// loadConfig: a limit no test call reaches, so every answer is OK while
// Redis is up.
const loadConfig = `domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
`

// TestRedisKilledUnderLoad: 16 callers, Redis killed halfway, 0 gRPC
// errors under the local and fail_open policies (LIMITKIT_ON_FAILURE).
func TestRedisKilledUnderLoad(t *testing.T) {
	for _, policy := range []string{"local", "fail_open"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t)
			root, config := runtimeDir(t)
			writeFile(t, filepath.Join(config, "rl.yaml"), loadConfig)
			env := baseEnv(root)
			env["REDIS_SOCKET_TYPE"], env["REDIS_URL"], env["LIMITKIT_ON_FAILURE"] = "tcp", srv.Addr(), policy
			env["LOG_LEVEL"] = "warn"
			in := start(t, env)

			const callers, perCaller = 16, 150
			var calls, errs, overs, degradedSeen atomic.Int64
			killAt := int64(callers * perCaller / 2)
			var kill sync.Once
			killed := make(chan struct{})
			deadline := time.Now().Add(60 * time.Second)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := 0; i < perCaller && time.Now().Before(deadline); i++ {
						resp, err := in.ask("rl", []string{"user", fmt.Sprint(c)})
						if n := calls.Add(1); n == killAt {
							kill.Do(func() { close(killed) })
						}
						switch {
						case err != nil:
							if errs.Add(1) <= 3 {
								t.Errorf("gRPC error with Redis down: %v", err)
							}
						case resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
							overs.Add(1)
						}
					}
				})
			}
			<-killed
			srv.Kill()
			wg.Wait()
			_, body := in.get(t, in.Debug, "/metrics")
			if strings.Contains(body, "limitkit_degraded_decisions_total{") {
				degradedSeen.Store(1)
			}
			t.Logf("%s: %d calls, %d gRPC errors, %d over the limit, degraded decisions seen: %v", policy, calls.Load(), errs.Load(), overs.Load(), degradedSeen.Load() == 1)
			if errs.Load() != 0 || overs.Load() != 0 {
				t.Fatalf("%d gRPC errors and %d refusals, want none", errs.Load(), overs.Load())
			}
			if degradedSeen.Load() == 0 {
				t.Fatal("no decision was degraded: Redis was never seen down, the test proved nothing")
			}
		})
	}
}

// serviceBinary returns the binary the process tests run: this test binary,
// which runs main when runAsBinaryEnv is set (TestMain).
func serviceBinary() (string, error) {
	return os.Executable()
}

// TestSIGTERMDrains runs the binary as a process: with calls held in
// flight by a paused Redis, SIGTERM turns /healthcheck to 500 while the
// calls finish, each with an answer, and the process exits 0.
func TestSIGTERMDrains(t *testing.T) {
	bin, err := serviceBinary()
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), loadConfig)
	env := baseEnv(root)
	// The deadline outlasts the pause, so calls wait for Redis.
	env["REDIS_SOCKET_TYPE"], env["REDIS_URL"], env["LIMITKIT_REDIS_DEADLINE"] = "tcp", srv.Addr(), "30s"
	env["LOG_LEVEL"] = "warn"
	env[runAsBinaryEnv] = "1"
	cmd := exec.Command(bin)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The "listening" line carries the bound addresses.
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	var in instance
	in.t = t
	timeout := time.After(30 * time.Second)
	for in.GRPC == "" {
		select {
		case l := <-lines:
			if strings.Contains(l, "msg=listening") {
				in.GRPC, in.HTTP, in.Debug = field(l, "grpc"), field(l, "http"), field(l, "debug")
			}
		case <-timeout:
			t.Fatal("the binary did not say where it listens within 30s")
		}
	}
	conn, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in.rl = rlsv3.NewRateLimitServiceClient(conn)
	if _, err := in.ask("rl", []string{"user", "warm"}); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	const calls = 8
	results := make(chan error, calls)
	for i := range calls {
		go func() {
			resp, err := in.ask("rl", []string{"user", fmt.Sprint(i)})
			if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("answer %v", resp.GetOverallCode())
			}
			results <- err
		}()
	}
	eventually(t, "8 calls in flight", func() bool { return in.metric(t, "limitkit_rls_calls_in_flight") == fmt.Sprint(calls) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/healthcheck fails once SIGTERM is received", func() bool {
		code, _ := in.get(t, in.HTTP, "/healthcheck")
		return code == 500
	})
	srv.Resume()
	for range calls {
		if err := <-results; err != nil {
			t.Errorf("a call in flight at SIGTERM: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the binary did not exit within 30s of draining")
	}
}

// field reads key=value from a text log line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestHTTPServersBoundSlowAndIdleClients: the HTTP endpoints drop a client
// that is slow to send its headers or idle on a kept-alive connection, and
// set no write timeout, which would cut a 30 s CPU profile short.
func TestHTTPServersBoundSlowAndIdleClients(t *testing.T) {
	s := newHTTPServer(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("ReadHeaderTimeout %v, IdleTimeout %v: both must be set", s.ReadHeaderTimeout, s.IdleTimeout)
	}
	if s.WriteTimeout != 0 && s.WriteTimeout < 30*time.Second {
		t.Fatalf("WriteTimeout %v cuts a 30 s profile short", s.WriteTimeout)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// syncBuffer collects a server's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// instance is run() serving in-process on free loopback ports.
type instance struct {
	addrs
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
	conn   *grpc.ClientConn
	rl     rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
}

// runtimeDir makes RUNTIME_ROOT/ratelimit/config and returns the root and
// the config folder.
func runtimeDir(t *testing.T) (root, config string) {
	root = t.TempDir()
	config = filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		t.Fatal(err)
	}
	return root, config
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp-write"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// baseEnv listens on free loopback ports and polls the runtime directory
// often.
func baseEnv(root string) map[string]string {
	return map[string]string{
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"LIMITKIT_RUNTIME_POLL_INTERVAL": "20ms", "LOG_LEVEL": "debug",
	}
}

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// start runs the service with env and connects a client to it.
func start(t *testing.T, env map[string]string) *instance {
	t.Helper()
	return startWith(t, env, insecure.NewCredentials())
}

// startWith runs the service with env and connects a client to it over
// creds.
func startWith(t *testing.T, env map[string]string, creds credentials.TransportCredentials) *instance {
	t.Helper()
	in := &instance{t: t, done: make(chan error, 1), logs: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	ready := make(chan addrs, 1)
	go func() { in.done <- run(ctx, lookupOf(env), in.logs, func(a addrs) { ready <- a }) }()
	select {
	case in.addrs = <-ready:
	case err := <-in.done:
		cancel()
		t.Fatalf("run: %v\nlogs:\n%s", err, in.logs)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("not listening within 30s\nlogs:\n%s", in.logs)
	}
	conn, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	in.conn, in.rl, in.health = conn, rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	t.Cleanup(func() {
		in.stop()
		if t.Failed() {
			t.Logf("server logs:\n%s", in.logs)
		}
	})
	return in
}

// stop cancels run (as SIGTERM does) and returns what it returned.
func (in *instance) stop() error {
	in.cancel()
	if in.conn != nil {
		_ = in.conn.Close()
		in.conn = nil
	}
	select {
	case err := <-in.done:
		in.done <- err
		return err
	case <-time.After(30 * time.Second):
		in.t.Error("run did not return within 30s of its context ending")
		return nil
	}
}

// ask sends one request-path call as Envoy's filter does: hits_addend 0
// at the request level, one descriptor per entry list.
func (in *instance) ask(domain string, descriptors ...[]string) (*rlsv3.RateLimitResponse, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, d := range descriptors {
		req.Descriptors = append(req.Descriptors, descriptor(d...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return in.rl.ShouldRateLimit(ctx, req)
}

// descriptor builds one descriptor from key, value pairs (a key alone
// when the count is odd).
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		e := &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i]}
		if i+1 < len(kv) {
			e.Value = kv[i+1]
		}
		d.Entries = append(d.Entries, e)
	}
	return d
}

func (in *instance) healthStatus(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := in.health.Check(ctx, &healthpb.HealthCheckRequest{Service: healthService})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return resp.GetStatus()
}

func (in *instance) get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample whose line starts with prefix
// (name and labels) on the debug port's /metrics, or "" when absent.
func (in *instance) metric(t *testing.T, prefix string) string {
	t.Helper()
	_, body := in.get(t, in.Debug, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix+" ") {
			return strings.TrimPrefix(line, prefix+" ")
		}
	}
	return ""
}

// eventually polls cond for at most 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

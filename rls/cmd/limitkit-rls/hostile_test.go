package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/rls/internal/envsettings"
)

// aliasBomb is the few-kilobyte file whose YAML aliases expand to
// 10^10 descriptors: anchors under the ignored metadata key, each level a
// list of ten descriptors whose descriptors point at the level below.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: k\n    metadata:\n")
	for l := range 10 {
		fmt.Fprintf(&b, "      l%d: &l%d [", l, l)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			if l == 0 {
				fmt.Fprintf(&b, "{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}", i)
			} else {
				fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}", i, l-1)
			}
		}
		b.WriteString("]\n")
	}
	b.WriteString("    descriptors: *l9\n")
	return b.String()
}

// TestHostileRuntimeFiles: a named pipe and a symlink to /dev/zero in the
// runtime directory are skipped with a log line and later changes apply;
// an alias bomb is refused naming its file while the last good
// configuration stays in force; the service still stops on SIGTERM.
func TestHostileRuntimeFiles(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	in := start(t, baseEnv(root))

	if err := syscall.Mkfifo(filepath.Join(config, "x.yaml"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(config, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both logged as skipped", func() bool {
		logs := in.logs.String()
		return strings.Contains(logs, `msg="runtime file skipped" file=x.yaml reason="a named pipe`) &&
			strings.Contains(logs, `msg="runtime file skipped" file=zero.yaml reason="a device`)
	})
	writeFile(t, filepath.Join(config, "other.yaml"), otherDomain)
	eventually(t, "a change after them is applied", func() bool { return strings.Contains(in.domains(t), "domains: other, rl\n") })

	began := time.Now()
	writeFile(t, filepath.Join(config, "bomb.yaml"), aliasBomb())
	eventually(t, "the alias bomb refused", func() bool {
		return in.metric(t, "ratelimit_service_config_load_error") == "1"
	})
	t.Logf("alias bomb of %d bytes refused %v after it was written", len(aliasBomb()), time.Since(began).Round(time.Millisecond))
	if logs := in.logs.String(); !strings.Contains(logs, "bomb.yaml") || !strings.Contains(logs, "YAML aliases expand to more than") {
		t.Fatalf("the refusal does not name the file and the aliases:\n%s", logs)
	}
	if d := in.domains(t); !strings.Contains(d, "domains: other, rl\n") {
		t.Fatalf("after the alias bomb /rlconfig %q, want the last good domains", d)
	}
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v after the alias bomb", got)
	}
	if resp, err := in.ask("rl", []string{"foo"}); err != nil || resp.GetOverallCode().String() != "OK" {
		t.Fatalf("a call on the last good config: %v %v", resp, err)
	}
	if err := in.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// stalledConfig: a limit no call reaches, and one the calls pass.
const stalledConfig = `domain: rl
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
  - key: ip
    rate_limit:
      unit: hour
      requests_per_unit: 3
`

// TestStalledRedisWithDenyCache: with the deny cache on and Redis stopped
// (SIGSTOP), every call answers. Its messages (a rule written under for
// the first time, a denied all-or-nothing call giving units back) used to
// be published on the call's path, bounded by the call's deadline or by
// REDIS_TIMEOUT (10 s). Each call carries a 2 s deadline: 20 times
// LIMITKIT_REDIS_DEADLINE, a fifth of REDIS_TIMEOUT.
func TestStalledRedisWithDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), stalledConfig)
	env := baseEnv(root)
	env["REDIS_SOCKET_TYPE"], env["REDIS_URL"], env["LOCAL_CACHE_SIZE_IN_BYTES"] = "tcp", srv.Addr(), "1048576"
	env["LOG_LEVEL"] = "warn"
	in := start(t, env)
	if resp, err := in.ask("rl", []string{"user", "warm"}); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with Redis up: %v %v", resp, err)
	}
	srv.Pause()
	defer srv.Resume()
	var slowest time.Duration
	over := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		began := time.Now()
		// The ip rule is first written under now; past 3 the calls are denied.
		resp, err := in.rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", fmt.Sprint(i)), descriptor("ip", "10.0.0.1")}})
		cancel()
		slowest = max(slowest, time.Since(began))
		if err != nil {
			t.Fatalf("call %d with Redis stopped: %v", i, err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over == 0 {
		t.Fatal("no call was denied: the denied path was not exercised")
	}
	if v := in.metric(t, "limitkit_deny_cache_messages_dropped_total"); v == "" {
		t.Fatal("no limitkit_deny_cache_messages_dropped_total on /metrics")
	}
	t.Logf("20 calls with Redis stopped and the deny cache on (%d denied): slowest %v (LIMITKIT_REDIS_DEADLINE 100ms)", over, slowest.Round(time.Millisecond))
}

// TestMemoryStoreBound: LIMITKIT_MEMORY_MAX_KEYS bounds the in-memory
// store; a flood of keys evicts a spent one, which gets its allowance back,
// and limitkit_memory_store_evictions_total counts it.
func TestMemoryStoreBound(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute) // foo: 2 a minute
	env := baseEnv(root)
	env["LIMITKIT_MEMORY_MAX_KEYS"] = "64"
	in := start(t, env)
	const evictions = `limitkit_memory_store_evictions_total{store="memory"}`
	if v := in.metric(t, evictions); v != "0" {
		t.Fatalf("%s is %q before any eviction, want 0", evictions, v)
	}
	for range 2 {
		in.ask("rl", []string{"foo", "spent"})
	}
	if resp, _ := in.ask("rl", []string{"foo", "spent"}); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the third call in a minute: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	for i := range 1000 {
		if _, err := in.ask("rl", []string{"foo", fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	v := in.metric(t, evictions)
	if v == "" || v == "0" {
		t.Fatalf("%s is %q after 1000 keys through 64, want evictions counted", evictions, v)
	}
	resp, _ := in.ask("rl", []string{"foo", "spent"})
	t.Logf("64 keys, 1000 more: %s evictions; the spent key now answers %v", v, resp.GetOverallCode())
	if err := func() error {
		_, err := settingsFail(map[string]string{"LIMITKIT_MEMORY_MAX_KEYS": "0"})
		return err
	}(); err == nil || !strings.Contains(err.Error(), "LIMITKIT_MEMORY_MAX_KEYS") {
		t.Fatalf("LIMITKIT_MEMORY_MAX_KEYS=0: %v", err)
	}
}

func settingsFail(env map[string]string) (*envsettings.Settings, error) {
	return envsettings.Load(lookupOf(env))
}

// TestSlowJSONBody: a /json body trickled slower than jsonReadTimeout is
// cut off with 400 (it used to hold its connection as long as the client
// liked); a body past maxJSONBody is refused.
func TestSlowJSONBody(t *testing.T) {
	old := jsonReadTimeout
	jsonReadTimeout = 200 * time.Millisecond
	t.Cleanup(func() { jsonReadTimeout = old })
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	in := start(t, baseEnv(root))

	conn, err := net.Dial("tcp", in.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"domain":"rl","descriptors":[{"entries":[{"key":"foo"}]}]}`
	fmt.Fprintf(conn, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5])
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to a stalled body within 20s: %v", err)
	}
	if !strings.Contains(status, "400") {
		t.Fatalf("a stalled body: %q, want 400", status)
	}

	resp, err := http.Post("http://"+in.HTTP+"/json", "application/json", strings.NewReader(strings.Repeat(" ", maxJSONBody+1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body past %d bytes: %d, want 400", maxJSONBody, resp.StatusCode)
	}
}

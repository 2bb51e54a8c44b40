package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// envoyConfig: 2 per minute per foo value; 20 per minute and 10 per hour
// on two descriptors of one request.
const envoyConfig = `domain: rl
descriptors:
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: cost
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: per_hour
    rate_limit:
      unit: hour
      requests_per_unit: 10
`

// filterAllows is what Envoy's ratelimit filter does with an answer: an
// error lets the request through unless failure_mode_deny is set, and
// OVER_LIMIT refuses it (429).
func filterAllows(resp *rlsv3.RateLimitResponse, err error, failureModeDeny bool) bool {
	if err != nil {
		return !failureModeDeny
	}
	return resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT
}

// streamDone is the call Envoy makes when a stream ends for an action with
// apply_on_stream_done: the request-level hits_addend carries the cost.
func (in *instance) streamDone(domain string, hits uint32, kv ...string) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return in.rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(kv...)}})
}

// envoyScenario drives one store through what Envoy's filter sends; id
// keeps the keys of runs on a shared server apart.
func envoyScenario(t *testing.T, in *instance, id string) {
	t.Helper()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := in.ask("rl", []string{"foo", id})
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if resp.GetOverallCode() != want {
			t.Fatalf("call %d: %v, want %v (%v)", i+1, resp.GetOverallCode(), want, resp)
		}
		st := resp.GetStatuses()[0]
		if i < 2 && st.GetLimitRemaining() != uint32(1-i) {
			t.Fatalf("call %d: remaining %d, want %d", i+1, st.GetLimitRemaining(), 1-i)
		}
		if got := filterAllows(resp, err, true); got != (i < 2) {
			t.Fatalf("call %d: the filter allows %v", i+1, got)
		}
	}
	// Stream done with hits_addend 3 of 5, then 3 more is refused, 2 fit.
	if resp, err := in.streamDone("rl", 3, "cost", id); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
		resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("stream done, 3 of 5: %v %v", resp, err)
	}
	if resp, err := in.streamDone("rl", 3, "cost", id); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("stream done, 3 more: %v %v", resp, err)
	}
	if resp, err := in.streamDone("rl", 2, "cost", id); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK ||
		resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("stream done, the 2 left (a refusal consumed nothing): %v %v", resp, err)
	}
	// The reference's 20/min and 10/hour in one request: the 11th is over.
	for i := range 11 {
		resp, err := in.ask("rl", []string{"per_minute", id}, []string{"per_hour", id})
		if err != nil {
			t.Fatal(err)
		}
		if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != (i == 10) {
			t.Fatalf("minute+hour call %d: %v", i+1, resp)
		}
	}
	// An unknown domain is OK.
	if resp, err := in.ask("nowhere", []string{"foo", id}); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v %v", resp, err)
	}
}

func envoyEnv(t *testing.T, extra ...string) map[string]string {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), envoyConfig)
	env := baseEnv(root)
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// TestEnvoyOnMemory: with no REDIS_URL and no BACKEND_TYPE the service runs
// in memory and says so.
func TestEnvoyOnMemory(t *testing.T) {
	in := start(t, envoyEnv(t))
	envoyScenario(t, in, "m")
	if !strings.Contains(in.logs.String(), "in-memory store") {
		t.Fatalf("the log does not say the store is in memory:\n%s", in.logs)
	}
}

// TestEnvoyOnRedis: the reference's REDIS_* variables and limitkit's URL,
// with both clients, on one server, a 3-master cluster and Sentinel.
func TestEnvoyOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3, 0)
	sentinel := redistest.StartSentinel(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			env  []string
		}{
			{"single", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr()}},
			{"url", []string{"LIMITKIT_BACKEND_URL", "redis://" + srv.Addr() + "/0"}},
			{"denycache", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr(), "LOCAL_CACHE_SIZE_IN_BYTES", "1048576"}},
			{"cluster", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "CLUSTER", "REDIS_URL", strings.Join(cluster.Addrs(), ",")}},
			{"sentinel", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "SENTINEL",
				"REDIS_URL", sentinel.MasterName + "," + strings.Join(sentinel.SentinelAddrs(), ",")}},
		}
		for _, c := range cases {
			t.Run(client+"/"+c.name, func(t *testing.T) {
				in := start(t, envoyEnv(t, append(c.env, "LIMITKIT_REDIS_CLIENT", client, "LIMITKIT_REDIS_DEADLINE", "2s")...))
				envoyScenario(t, in, client+c.name)
				if c.name == "denycache" && !strings.Contains(in.logs.String(), "deny cache of 8192 entries") {
					t.Fatalf("LOCAL_CACHE_SIZE_IN_BYTES did not turn on the deny cache:\n%s", in.logs)
				}
				// Every decision was Redis's: none degraded to the local policy.
				if _, body := in.get(t, in.Debug, "/metrics"); strings.Contains(body, "limitkit_degraded_decisions_total{") {
					t.Fatal("some decisions were degraded: Redis was not what decided")
				}
			})
		}
	}
}

// TestEnvoyMetrics reads the reference's metrics back, on the debug port
// and at PROMETHEUS_ADDR/PROMETHEUS_PATH.
func TestEnvoyMetrics(t *testing.T) {
	in := start(t, envoyEnv(t, "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:0", "PROMETHEUS_PATH", "/prom"))
	envoyScenario(t, in, "x")
	for prefix, want := range map[string]string{
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="foo",key2=""}`:      "3",
		`ratelimit_service_rate_limit_within_limit{domain="rl",key1="foo",key2=""}`:    "2",
		`ratelimit_service_rate_limit_near_limit{domain="rl",key1="foo",key2=""}`:      "1",
		`ratelimit_service_rate_limit_over_limit{domain="rl",key1="foo",key2=""}`:      "1",
		`ratelimit_service_rate_limit_over_limit{domain="rl",key1="cost",key2=""}`:     "1", // 3 on 3 of 5: the 1 hit past the limit
		`ratelimit_service_rate_limit_near_limit{domain="rl",key1="cost",key2=""}`:     "2", // 1 refused in 4..5, 1 admitted at 5
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="per_hour",key2=""}`: "11",
		`ratelimit_service_config_load_success`:                                        "1",
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:              "18",
	} {
		if got := in.metric(t, prefix); got != want {
			t.Errorf("%s = %q, want %s", prefix, got, want)
		}
	}
	// limitkit's own, by window (the service's key prefixes): 4 foo, cost
	// and per_minute admissions of the minute, 2 refusals.
	if got := in.metric(t, `limitkit_decisions_total{outcome="allowed",policy="rls:60000:"}`); got != "4" {
		t.Errorf("limitkit_decisions_total allowed per minute = %q, want 4 beside the reference's metrics", got)
	}
	code, body := in.get(t, in.Prometheus, "/prom")
	if code != 200 || !strings.Contains(body, "ratelimit_service_rate_limit_total_hits") {
		t.Fatalf("PROMETHEUS_ADDR/PROMETHEUS_PATH: %d, %d bytes", code, len(body))
	}
}

// TestReferenceErrors: with Redis gone, LIMITKIT_REFERENCE_ERRORS answers
// a gRPC error as the reference does, so that Envoy's failure_mode_deny
// decides; without it each limit's policy answers and there is no error.
func TestReferenceErrors(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	for _, c := range []struct {
		env       []string
		wantError bool
	}{
		{[]string{"LIMITKIT_REFERENCE_ERRORS", "true"}, true},
		{nil, false},
	} {
		in := start(t, envoyEnv(t, append(c.env, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", addr)...))
		resp, err := in.ask("rl", []string{"foo", "down"})
		if (err != nil) != c.wantError {
			t.Fatalf("%v: %v %v", c.env, resp, err)
		}
		if c.wantError {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("error %v, want Unavailable", err)
			}
			if filterAllows(resp, err, true) || !filterAllows(resp, err, false) {
				t.Fatal("failure_mode_deny is not what decides")
			}
		} else if !filterAllows(resp, err, true) {
			t.Fatalf("the local policy refused the first request: %v", resp)
		}
		_ = in.stop()
	}
}

// TestJSONEndpoint: POST /json answers as the gRPC call, 429 when over.
func TestJSONEndpoint(t *testing.T) {
	in := start(t, envoyEnv(t))
	body := `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"j"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, out := in.post(t, "/json", body)
		if code != want || !strings.Contains(out, "overallCode") {
			t.Fatalf("call %d: %d %s, want %d", i+1, code, out, want)
		}
	}
	if code, _ := in.post(t, "/json", "{not json"); code != 400 {
		t.Fatalf("bad JSON: %d, want 400", code)
	}
}

func (in *instance) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+in.HTTP+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/rls/internal/metrics"
)

// The reference's integration tests (test/integration/integration_test.go
// and its runtime directory), restated against the binary.

const refBasicYAML = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: key1_local
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

const refAnotherYAML = `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key2_local
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3_local
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
  - key: key4_local
    rate_limit:
      unit: day
      requests_per_unit: 20
`

const refShareThresholdYAML = `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
`

const refReloadYAML = `domain: reload
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: block
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

// refRuntime writes the reference's integration runtime directory.
func refRuntime(t *testing.T) (root, config string) {
	root, config = runtimeDir(t)
	writeFile(t, filepath.Join(config, "basic.yaml"), refBasicYAML)
	writeFile(t, filepath.Join(config, "another.yaml"), refAnotherYAML)
	writeFile(t, filepath.Join(config, "share_threshold.yaml"), refShareThresholdYAML)
	return root, config
}

// status is one descriptor's answer, compared as text.
func statusText(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	if st.GetCurrentLimit() == nil {
		return fmt.Sprintf("%v %d", st.GetCode(), st.GetLimitRemaining())
	}
	return fmt.Sprintf("%v %d/%v %d", st.GetCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining())
}

// TestRef_Integration_BasicConfig restates testBasicBaseConfig on the
// memory store, and on Redis with the reference's own
// LOCAL_CACHE_SIZE_IN_BYTES=1000 and with CACHE_KEY_PREFIX.
func TestRef_Integration_BasicConfig(t *testing.T) {
	type variant struct {
		name  string
		env   []string
		local bool
	}
	variants := []variant{{name: "Memory"}}
	if srv := redistest.Start(t); srv != nil {
		variants = append(variants,
			variant{name: "WithoutPerSecondRedis", env: []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr()}},
			variant{name: "WithoutPerSecondRedisWithLocalCache", env: []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr(), "LOCAL_CACHE_SIZE_IN_BYTES", "1000"}, local: true},
			variant{name: "WithoutPerSecondRedisWithCachePrefix", env: []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr(), "CACHE_KEY_PREFIX", "prefix:"}},
		)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			root, _ := refRuntime(t)
			env := baseEnv(root)
			// The case counts on Redis: a slow call on a loaded machine
			// must not hand a decision to the local failure policy.
			env["LIMITKIT_REDIS_DEADLINE"] = "20s"
			for i := 0; i+1 < len(v.env); i += 2 {
				env[v.env[i]] = v.env[i+1]
			}
			in := start(t, env)
			key := func(k string) string {
				if v.local {
					return k + "_local"
				}
				return k
			}
			resp, err := in.ask("foo", []string{key("hello"), "world"})
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || statusText(resp.GetStatuses()[0]) != "OK 0" {
				t.Fatalf("unknown domain: %v %v", resp, err)
			}
			resp, err = in.ask("basic", []string{key("key1"), "foo"})
			if err != nil || statusText(resp.GetStatuses()[0]) != "OK 50/SECOND 49" {
				t.Fatalf("basic key1: %v %v", resp, err)
			}
			if got := in.metric(t, `ratelimit_service_rate_limit_total_hits{domain="basic",key1="`+key("key1")+`",key2=""}`); got != "1" {
				t.Errorf("basic key1 total_hits %q; want 1", got)
			}
			// Over a minute limit on a random key, within one minute.
			awayFromWindowEnd(t, time.Minute)
			r := strconv.FormatUint(rand.Uint64(), 10)
			for i := range 25 {
				resp, err := in.ask("another", []string{key("key2"), r})
				want := fmt.Sprintf("OK 20/MINUTE %d", 20-(i+1))
				if i >= 20 {
					want = "OVER_LIMIT 20/MINUTE 0"
				}
				if err != nil || statusText(resp.GetStatuses()[0]) != want || resp.GetOverallCode() != resp.GetStatuses()[0].GetCode() {
					t.Fatalf("key2 call %d: %v %v; want %s", i, resp, err, want)
				}
				labels := `{domain="another",key1="` + key("key2") + `",key2=""}`
				if got := in.metric(t, "ratelimit_service_rate_limit_total_hits"+labels); got != strconv.Itoa(i+1) {
					t.Errorf("key2 call %d: total_hits %q", i, got)
				}
				wantOver := ""
				if i >= 20 {
					wantOver = strconv.Itoa(i - 19)
				}
				if got := in.metric(t, "ratelimit_service_rate_limit_over_limit"+labels); got != wantOver {
					t.Errorf("key2 call %d: over_limit %q; want %q", i, got, wantOver)
				}
			}
			// Two keys of one domain: key3 (10 per hour) refuses from the
			// 11th; key2's count then stays at 10 (all or nothing: the
			// reference's answer under STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
			awayFromWindowEnd(t, time.Minute)
			awayFromWindowEnd(t, time.Hour)
			r = strconv.FormatUint(rand.Uint64(), 10)
			for i := range 15 {
				resp, err := in.ask("another", []string{key("key2"), r}, []string{key("key3"), r})
				want1, want2 := fmt.Sprintf("OK 20/MINUTE %d", 20-(i+1)), fmt.Sprintf("OK 10/HOUR %d", 10-(i+1))
				overall := rlsv3.RateLimitResponse_OK
				if i >= 10 {
					want1, want2, overall = "OK 20/MINUTE 10", "OVER_LIMIT 10/HOUR 0", rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if err != nil || resp.GetOverallCode() != overall || statusText(resp.GetStatuses()[0]) != want1 || statusText(resp.GetStatuses()[1]) != want2 {
					t.Fatalf("key2+key3 call %d: %v %v; want %s, %s", i, resp, err, want1, want2)
				}
				labels3 := `{domain="another",key1="` + key("key3") + `",key2=""}`
				if got := in.metric(t, "ratelimit_service_rate_limit_total_hits"+labels3); got != strconv.Itoa(i+1) {
					t.Errorf("key3 call %d: total_hits %q", i, got)
				}
				if i >= 10 {
					if got := in.metric(t, "ratelimit_service_rate_limit_over_limit"+labels3); got != strconv.Itoa(i-9) {
						t.Errorf("key3 call %d: over_limit %q; want %d", i, got, i-9)
					}
				}
				if got := in.metric(t, `ratelimit_service_rate_limit_total_hits{domain="another",key1="`+key("key2")+`",key2=""}`); got != strconv.Itoa(i+26) {
					t.Errorf("key2 call %d: total_hits %q; want %d", i, got, i+26)
				}
				if got := in.metric(t, `ratelimit_service_rate_limit_over_limit{domain="another",key1="`+key("key2")+`",key2=""}`); got != "5" {
					t.Errorf("key2 call %d: over_limit %q; want 5", i, got)
				}
			}
			if v.local && !strings.Contains(in.logs.String(), "deny cache of 64 entries") {
				t.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=1000 did not start the deny cache at its least size:\n%s", in.logs)
			}
		})
	}
}

// awayFromWindowEnd waits, when the fixed window of length w ends within
// 20 s, until the next one starts: the reference's integration cases count
// a sequence of calls inside one window of the real clock.
func awayFromWindowEnd(t *testing.T, w time.Duration) {
	t.Helper()
	left := w - time.Duration(time.Now().UnixNano())%w
	if left < 20*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// TestRef_Integration_ShareThreshold: ten of files/* per hour in all.
func TestRef_Integration_ShareThreshold(t *testing.T) {
	root, _ := refRuntime(t)
	in := start(t, baseEnv(root))
	const domain = "share-threshold-test"
	awayFromWindowEnd(t, time.Hour)
	for i := range 10 {
		resp, err := in.ask(domain, []string{"files", "files/a.pdf"})
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("files/a.pdf call %d: %v %v", i, resp, err)
		}
	}
	// Another file shares the 10 per hour.
	resp, err := in.ask(domain, []string{"files", "files/b.csv"})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || statusText(resp.GetStatuses()[0]) != "OVER_LIMIT 10/HOUR 0" {
		t.Fatalf("files/b.csv after 10 of files/a.pdf: %v %v", resp, err)
	}
	// Without share_threshold each value counts apart.
	for i := range 10 {
		resp, err := in.ask(domain, []string{"files_no_share", fmt.Sprintf("files_no_share/%d-%d", i, rand.Int64())})
		if err != nil || statusText(resp.GetStatuses()[0]) != "OK 10/HOUR 9" {
			t.Fatalf("files_no_share call %d: %v %v", i, resp, err)
		}
	}
}

func TestRef_Integration_BasicReloadConfig(t *testing.T) {
	root, config := refRuntime(t)
	env := baseEnv(root)
	env["RUNTIME_WATCH_ROOT"] = "false"
	in := start(t, env)
	resp, err := in.ask("reload", []string{"block", "foo"})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || statusText(resp.GetStatuses()[0]) != "OK 0" {
		t.Fatalf("before the reload: %v %v", resp, err)
	}
	before := in.metric(t, "ratelimit_service_config_load_success")
	writeFile(t, filepath.Join(config, "reload.yaml"), refReloadYAML)
	eventually(t, "the reload is counted", func() bool { return in.metric(t, "ratelimit_service_config_load_success") != before })
	resp, err = in.ask("reload", []string{"key1", "foo"})
	if err != nil || statusText(resp.GetStatuses()[0]) != "OK 50/SECOND 49" {
		t.Fatalf("after the reload: %v %v", resp, err)
	}
	if resp, err := in.ask("reload", []string{"block", "foo"}); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("requests_per_unit 0 after the reload: %v %v", resp, err)
	}
	before = in.metric(t, "ratelimit_service_config_load_success")
	if err := os.Remove(filepath.Join(config, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the restore is counted", func() bool { return in.metric(t, "ratelimit_service_config_load_success") != before })
}

// TestRef_Service_HealthStatusAtLeastOneConfigLoaded: with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true, NOT_SERVING while no
// domain is loaded, SERVING once one is, NOT_SERVING again when the
// configuration holds none.
func TestRef_Service_HealthStatusAtLeastOneConfigLoaded(t *testing.T) {
	root, config := runtimeDir(t)
	env := baseEnv(root)
	env["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] = "true"
	in := start(t, env)
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("no domain loaded: %v; want NOT_SERVING", got)
	}
	if strings.Contains(in.logs.String(), "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED") && strings.Contains(in.logs.String(), "setting ignored") {
		t.Errorf("the setting is logged as ignored:\n%s", in.logs)
	}
	writeFile(t, filepath.Join(config, "basic.yaml"), refBasicYAML)
	eventually(t, "SERVING once a domain loads", func() bool { return in.healthStatus(t) == healthpb.HealthCheckResponse_SERVING })
	if err := os.Remove(filepath.Join(config, "basic.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NOT_SERVING with no domain again", func() bool { return in.healthStatus(t) == healthpb.HealthCheckResponse_NOT_SERVING })

	// TestServiceHealthStatus: without the setting an empty configuration
	// serves.
	root2, _ := runtimeDir(t)
	if got := start(t, baseEnv(root2)).healthStatus(t); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("no domain, setting off: %v; want SERVING", got)
	}
}

// TestRef_Utilities_SanitizeStatName restates the reference's stats key
// sanitizer (TestEscapingInvalidChartersInMetricName and its IPv4 rule):
// an address under detailed_metric stays one label, dots turned to '_'.
func TestRef_Utilities_SanitizeStatName(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "edge.yaml"), `domain: edge
descriptors:
  - key: d
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	in := start(t, baseEnv(root))
	for _, v := range []string{"10.0.0.1", "/foo:*:bar", "/foo|bar|baz"} {
		if _, err := in.ask("edge", []string{"d", v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.ask("edge", []string{"path", "/v1.2/x"}); err != nil {
		t.Fatal(err)
	}
	for _, labels := range []string{
		`{domain="edge",key1="d_10_0_0_1",key2=""}`,
		`{domain="edge",key1="d_/foo_*_bar",key2=""}`,
		`{domain="edge",key1="d_/foo_bar_baz",key2=""}`,
		`{domain="edge",key1="path_/v1",key2="2/x"}`, // a dot that is no address splits, as the reference's mapper does
	} {
		if got := in.metric(t, "ratelimit_service_rate_limit_total_hits"+labels); got != "1" {
			t.Errorf("total_hits%s = %q; want 1", labels, got)
		}
	}
}

// overrideRequest is one descriptor carrying its own limit.
func overrideRequest(domain, key, value string, rps, multiplier uint32) *rlsv3.RateLimitRequest {
	d := descriptor(key, value)
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rps, Unit: typev3.RateLimitUnit_SECOND}
	if multiplier > 1 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// TestMetricsBoundedInBytes (issue 31, item 3): 2,000 requests, each with
// a limit override and a distinct 1 MB value, leave /metrics small: each
// label value is at most metrics.MaxLabelBytes bytes, so the page stays
// under 5 MB (it was 4 GB; 21 MB after 10 such requests). Under the race
// detector 40 requests (each costs a second there on a loaded machine):
// unbounded labels would still make the page 40 MB, 8 times the bound.
func TestMetricsBoundedInBytes(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), "domain: rl\ndescriptors:\n  - key: any\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	env := baseEnv(root)
	env["LOG_LEVEL"] = "warn"
	in := start(t, env)
	deadline := time.Now().Add(5 * time.Minute)
	n := int64(2000)
	if raceDetector {
		n = 40
	}
	const callers = 4
	var next atomic.Int64
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			big := []byte(strings.Repeat("v", 1<<20))
			for i := next.Add(1); i <= n && time.Now().Before(deadline); i = next.Add(1) {
				copy(big, strconv.FormatInt(i, 10)+".")
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := in.rl.ShouldRateLimit(ctx, overrideRequest("rl", "user", string(big), 10, 1))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done := next.Load(); done <= n {
		t.Fatalf("%d of %d calls within the time bound", done-1, n)
	}
	_, body := in.get(t, in.Debug, "/metrics")
	const most = 5 << 20
	if len(body) > most {
		t.Fatalf("/metrics is %d bytes after %d requests of 1 MB values; want at most %d", len(body), n, most)
	}
	longest := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "ratelimit_service_rate_limit_total_hits{") {
			for _, part := range strings.Split(line, `",`) {
				longest = max(longest, len(part))
			}
		}
	}
	if longest > metrics.MaxLabelBytes+16 || longest < metrics.MaxLabelBytes/2 {
		t.Errorf("longest label of total_hits: %d bytes; want about metrics.MaxLabelBytes (%d)", longest, metrics.MaxLabelBytes)
	}
	t.Logf("/metrics: %d bytes after %d requests of 1 MB values", len(body), n)
}

// TestPolicyLabelBounded (issue 31, item 3): 30,000 overrides of distinct
// multipliers make one value of limitkit's policy label, not 30,000.
func TestPolicyLabelBounded(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), "domain: rl\ndescriptors:\n  - key: any\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	env := baseEnv(root)
	env["LOG_LEVEL"] = "warn"
	in := start(t, env)
	const n = 30000
	deadline := time.Now().Add(5 * time.Minute)
	// Four callers: one waited on each round trip, 40 s under -race.
	const callers = 4
	var next atomic.Int64
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= n && time.Now().Before(deadline); i = next.Add(1) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := in.rl.ShouldRateLimit(ctx, overrideRequest("rl", "user", "u", 10, uint32(i)))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done := next.Load(); done <= n {
		t.Fatalf("%d of %d calls within the time bound", done-1, n)
	}
	_, body := in.get(t, in.Debug, "/metrics")
	policies := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "limitkit_decisions_total{") {
			if i := strings.Index(line, `policy="`); i >= 0 {
				p := line[i+len(`policy="`):]
				policies[p[:strings.IndexByte(p, '"')]] = true
			}
		}
	}
	if len(policies) != 1 || !policies["rls:override:"] {
		t.Fatalf("policy label values after %d override windows: %d (%v); want only rls:override:", n, len(policies), keysOf(policies))
	}
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
		if len(out) == 5 {
			break
		}
	}
	return out
}

package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// envoyTimeout is Envoy's default rate-limit filter timeout.
const envoyTimeout = 20 * time.Millisecond

// deadlineConfig: a limit no test call reaches, so every answer is OK.
const deadlineConfig = `domain: envoy
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
`

// underEnvoy is what calls of envoyTimeout saw against a stalled Redis.
type underEnvoy struct {
	calls, timedOut, answered int // answered: OK within the deadline
	streak                    int // answered in a row since the breaker opened
	opened                    bool
}

// TestStallUnderEnvoysDeadline: redis-server stopped (SIGSTOP), a real gRPC
// client giving every call Envoy's 20 ms. With the default
// LIMITKIT_REDIS_DEADLINE the breaker opens (limitkit_breaker_transitions_total
// to open) and later calls are answered by the local policy within the
// 20 ms. The control runs the same calls against a service whose Redis
// calls never reach their deadline while the test runs (1m, longer than
// every probe): its breaker stays closed and the test's check fails on it,
// as it did when the default (100 ms) outlived Envoy's timeout and
// abandoned calls counted nothing. The control runs on go-redis only:
// rueidis at times reports the caller's own deadline as its error, which
// counts (the breaker opened in the control, 1 run of 1).
func TestStallUnderEnvoysDeadline(t *testing.T) {
	redistest.Require(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			srv := redistest.Start(t)
			def := startDeadline(t, srv.Addr(), client, "")
			var control *instance
			if client == "go-redis" {
				control = startDeadline(t, srv.Addr(), client, "1m")
			}
			srv.Pause()
			defer srv.Resume()
			got := def.underEnvoy(t, 400)
			t.Logf("FIGURE %s default deadline: %d calls, %d past 20 ms, %d answered, opened %v", client, got.calls, got.timedOut, got.answered, got.opened)
			if err := got.check(); err != "" {
				t.Fatalf("default LIMITKIT_REDIS_DEADLINE: %s (%+v)", err, got)
			}
			if control == nil {
				return
			}
			ctl := control.underEnvoy(t, 100)
			t.Logf("FIGURE %s control (1m deadline): %d calls, %d past 20 ms, %d answered, opened %v", client, ctl.calls, ctl.timedOut, ctl.answered, ctl.opened)
			if ctl.check() == "" {
				t.Fatalf("control: a breaker that cannot open passed the check (%+v)", ctl)
			}
		})
	}
}

// startDeadline runs the service on addr's Redis with client and deadline
// ("" for the default) and makes one call that Redis answers.
func startDeadline(t *testing.T, addr, client, deadline string) *instance {
	t.Helper()
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "envoy.yaml"), deadlineConfig)
	env := baseEnv(root)
	env["REDIS_SOCKET_TYPE"], env["REDIS_URL"], env["LIMITKIT_REDIS_CLIENT"] = "tcp", addr, client
	env["LOG_LEVEL"] = "warn"
	if deadline != "" {
		env["LIMITKIT_REDIS_DEADLINE"] = deadline
	}
	in := start(t, env)
	for range 5 { // dial the pool while Redis answers
		if resp, err := in.ask("envoy", []string{"user", "warm"}); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("with Redis up: %v %v", resp, err)
		}
	}
	return in
}

// underEnvoy makes up to n calls of envoyTimeout each, one after the
// other, and stops once 20 calls in a row after the breaker opened were
// answered within it.
func (in *instance) underEnvoy(t *testing.T, n int) underEnvoy {
	var u underEnvoy
	for u.calls < n && u.streak < 20 {
		u.calls++
		ctx, cancel := context.WithTimeout(context.Background(), envoyTimeout)
		resp, err := in.rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "envoy", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("user", "stalled")}})
		cancel()
		if !u.opened {
			u.opened = in.metric(t, `limitkit_breaker_transitions_total{breaker="redis",to="open"}`) != ""
		}
		switch {
		case err != nil:
			u.timedOut++
			u.streak = 0
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			u.answered++
			if u.opened {
				u.streak++
			}
		default:
			t.Fatalf("call %d: %v with a limit of a million", u.calls, resp.GetOverallCode())
		}
		time.Sleep(2 * time.Millisecond)
	}
	return u
}

// check says what is wrong with u, or "": the breaker opened and 20 calls
// in a row after it were answered within Envoy's timeout.
func (u underEnvoy) check() string {
	switch {
	case !u.opened:
		return "the breaker never opened"
	case u.streak < 20:
		return "no 20 calls in a row answered within 20 ms after the breaker opened"
	}
	return ""
}

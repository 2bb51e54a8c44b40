package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// blipConfig: 50 per hour per user, the reference's fixed window.
const blipConfig = `domain: blip
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 50
`

// TestBlipInTheService: the service's fallback store continues from what
// Redis last said. With either client, a user Redis refused (50 of 50)
// is refused while redis-server is frozen (SIGSTOP) for over a second under
// 16 callers, a user with 20 left is admitted at most 20, and a user Redis
// never saw gets the local policy's 50 (the control that local limiting
// works). Before baselines the spent user got 50 more.
func TestBlipInTheService(t *testing.T) {
	redistest.Require(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			srv := redistest.Start(t)
			root, config := runtimeDir(t)
			writeFile(t, filepath.Join(config, "blip.yaml"), blipConfig)
			env := baseEnv(root)
			env["REDIS_SOCKET_TYPE"], env["REDIS_URL"], env["LIMITKIT_REDIS_CLIENT"] = "tcp", srv.Addr(), client
			env["LOG_LEVEL"] = "warn"
			// A deadline a loaded test machine meets while Redis answers;
			// the stall is far longer.
			env["LIMITKIT_REDIS_DEADLINE"] = "250ms"
			in := start(t, env)
			ok := func(user string) bool {
				resp, err := in.ask("blip", []string{"user", user})
				if err != nil {
					t.Fatalf("gRPC error: %v", err)
				}
				return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
			}
			users := []string{"spent", "twenty", "fresh"}
			for range 50 {
				if !ok("spent") {
					t.Fatal("setup: the spent user was refused before its 50")
				}
			}
			if ok("spent") {
				t.Fatal("setup: Redis admitted a 51st")
			}
			for range 30 {
				if !ok("twenty") {
					t.Fatal("setup: the twenty user was refused")
				}
			}

			srv.Pause()
			stalled := time.Now()
			var admitted, calls [3]atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			for c := range 16 {
				wg.Go(func() {
					for i := 0; i < 3000 && !stop.Load(); i++ {
						k := (c + i) % 3
						if ok(users[k]) {
							admitted[k].Add(1)
						}
						calls[k].Add(1)
						time.Sleep(time.Millisecond)
					}
				})
			}
			eventually(t, "a second of stall and 100 calls for the never-seen user", func() bool {
				return time.Since(stalled) >= time.Second && calls[2].Load() >= 100
			})
			stop.Store(true)
			wg.Wait()
			srv.Resume()
			got := [3]int64{admitted[0].Load(), admitted[1].Load(), admitted[2].Load()}
			t.Logf("FIGURE service %s: admitted during the stall spent=%d twenty=%d fresh=%d (calls %d %d %d)",
				client, got[0], got[1], got[2], calls[0].Load(), calls[1].Load(), calls[2].Load())
			if got[0] != 0 || got[1] > 20 || got[2] != 50 {
				t.Fatalf("admitted during the stall %v: want spent 0, twenty at most 20, fresh 50 (%s)", got, fmt.Sprint(users))
			}
		})
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestLatencyFigures measures ShouldRateLimit over loopback gRPC, for the
// guide's "latency to expect": 4 and 64 callers, one descriptor, 2 s per
// store and caller count.
// It reports and asserts nothing; it runs only with LIMITKIT_RLS_LATENCY=1:
//
//	LIMITKIT_RLS_LATENCY=1 go test -run TestLatencyFigures -v ./rls/cmd/limitkit-rls/
func TestLatencyFigures(t *testing.T) {
	if os.Getenv("LIMITKIT_RLS_LATENCY") != "1" {
		t.Skip("set LIMITKIT_RLS_LATENCY=1 to measure")
	}
	srv := redistest.Start(t)
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"memory", nil},
		{"redis go-redis", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr()}},
		{"redis rueidis", []string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr(), "LIMITKIT_REDIS_CLIENT", "rueidis"}},
	} {
		root, config := runtimeDir(t)
		writeFile(t, filepath.Join(config, "rl.yaml"), loadConfig)
		env := baseEnv(root)
		env["LOG_LEVEL"] = "error"
		for i := 0; i+1 < len(c.env); i += 2 {
			env[c.env[i]] = c.env[i+1]
		}
		in := start(t, env)
		for _, callers := range []int{4, 64} {
			var mu sync.Mutex
			var lat []time.Duration
			end := time.Now().Add(2 * time.Second)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					var mine []time.Duration
					for n := 0; n < 1_000_000 && time.Now().Before(end); n++ {
						t0 := time.Now()
						if _, err := in.ask("rl", []string{"user", fmt.Sprint(i, "-", n%100)}); err != nil {
							t.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			slices.Sort(lat)
			q := func(p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
			t.Logf("%-15s %2d callers %6d calls/s  p50 %v  p99 %v", c.name, callers, len(lat)/2, q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond))
		}
		_ = in.stop()
	}
}

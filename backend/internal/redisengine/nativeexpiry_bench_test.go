package redisengine_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// BenchmarkNativeExpiryServerCPU chooses how the native path sets a fixed
// window key's expiry, by the Redis server's CPU per decision: 64 callers
// on one rueidis client (auto-pipelined), each decision 3 limits on keys
// of 10,000 ids, windows of 1 s (the rls benchmark's shape), each variant
// 2 s after 1 s of warm-up, interleaved over 3 rounds, medians.
//
//	go test -run x -bench NativeExpiryServerCPU -benchtime 1x ./backend/internal/redisengine/
//
// Variants: INCRBY+PEXPIRE every time (what the stores send); SET NX PX
// then INCRBY; INCRBY then, in a second round trip, PEXPIRE for the keys
// whose count equals the cost (first in their window); INCRBY+PEXPIRE NX;
// and sliding_counter's shape on native commands (with a GET of the
// previous window).
func BenchmarkNativeExpiryServerCPU(b *testing.B) {
	srv := redistest.Start(b)
	ctl := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = ctl.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(b, err)
	b.Cleanup(rc.Close)
	ctx := context.Background()
	const ids, limits = 10_000, 3
	key := func(i, id int, now int64) string {
		return "ne" + strconv.Itoa(i) + ":{" + strconv.Itoa(id) + "}:fw:" + strconv.FormatInt(now-now%1000, 10)
	}
	// previous names the key of the window before k's.
	previous := func(k string) string {
		at := strings.LastIndexByte(k, ':') + 1
		start, _ := strconv.ParseInt(k[at:], 10, 64)
		return k[:at] + strconv.FormatInt(start-1000, 10)
	}
	type variant struct {
		name   string
		decide func(keys []string) error
	}
	variants := []variant{
		{"INCRBY+PEXPIRE", func(keys []string) error {
			cmds := make(rueidis.Commands, 0, 2*len(keys))
			for _, k := range keys {
				cmds = append(cmds, rc.B().Incrby().Key(k).Increment(1).Build(), rc.B().Pexpire().Key(k).Milliseconds(3000).Build())
			}
			for _, r := range rc.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		}},
		{"SET NX PX+INCRBY", func(keys []string) error {
			cmds := make(rueidis.Commands, 0, 2*len(keys))
			for _, k := range keys {
				cmds = append(cmds, rc.B().Set().Key(k).Value("0").Nx().PxMilliseconds(3000).Build(), rc.B().Incrby().Key(k).Increment(1).Build())
			}
			for _, r := range rc.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
					return err
				}
			}
			return nil
		}},
		{"INCRBY, PEXPIRE if first", func(keys []string) error {
			cmds := make(rueidis.Commands, 0, len(keys))
			for _, k := range keys {
				cmds = append(cmds, rc.B().Incrby().Key(k).Increment(1).Build())
			}
			var exp rueidis.Commands
			for i, r := range rc.DoMulti(ctx, cmds...) {
				n, err := r.AsInt64()
				if err != nil {
					return err
				}
				if n == 1 {
					exp = append(exp, rc.B().Pexpire().Key(keys[i]).Milliseconds(3000).Build())
				}
			}
			if len(exp) > 0 {
				for _, r := range rc.DoMulti(ctx, exp...) {
					if err := r.Error(); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"INCRBY+PEXPIRE NX", func(keys []string) error {
			cmds := make(rueidis.Commands, 0, 2*len(keys))
			for _, k := range keys {
				cmds = append(cmds, rc.B().Incrby().Key(k).Increment(1).Build(), rc.B().Pexpire().Key(k).Milliseconds(3000).Nx().Build())
			}
			for _, r := range rc.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		}},
		// sliding_counter's native shape: the current window's INCRBY and
		// PEXPIRE and the previous window's GET.
		{"sliding_counter: +GET previous", func(keys []string) error {
			cmds := make(rueidis.Commands, 0, 3*len(keys))
			for _, k := range keys {
				cmds = append(cmds, rc.B().Incrby().Key(k).Increment(1).Build(), rc.B().Pexpire().Key(k).Milliseconds(3000).Build(),
					rc.B().Get().Key(previous(k)).Build())
			}
			for _, r := range rc.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
					return err
				}
			}
			return nil
		}},
	}
	drive := func(v variant, d time.Duration) (decisions int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for g := range 64 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				keys := make([]string, limits)
				for time.Now().Before(stop) {
					now := time.Now().UnixMilli()
					for i := range keys {
						keys[i] = key(i, rng.IntN(ids), now)
					}
					if err := v.decide(keys); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	cpu := map[string][]float64{}
	rates := map[string][]float64{}
	for round := range 3 {
		for i := range variants {
			v := variants[(i+round)%len(variants)]
			require.NoError(b, ctl.FlushAll(ctx).Err())
			drive(v, time.Second)
			c0 := serverCPU(ctx, b, ctl)
			n := drive(v, 2*time.Second)
			c1 := serverCPU(ctx, b, ctl)
			cpu[v.name] = append(cpu[v.name], (c1-c0)*1e6/float64(n))
			rates[v.name] = append(rates[v.name], float64(n)/2)
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	base := med(cpu[variants[0].name])
	for _, v := range variants {
		b.Logf("%-26s server CPU µs/decision %6.2f (%.2fx)  decisions/s %8.0f  (medians of 3)", v.name,
			med(cpu[v.name]), med(cpu[v.name])/base, med(rates[v.name]))
	}
}

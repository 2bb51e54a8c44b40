package fallback_test

// Figures for docs/outages.md: how long decisions stay degraded after a
// 1 s stall, and how often the breaker opens over a healthy Redis on a
// loaded machine. They are measured, not asserted (timing on a shared
// machine), and run only when asked:
//
//	LIMITKIT_BLIP_FIGURES=1 go test -count=1 -run TestBlipFigures -v ./fallback/
//
// Each prints lines starting with "FIGURE". The test uses the public API
// of fallback as it was before baselines, so that the same file measures
// the store before and after a change.

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// figureLoad runs callers goroutines taking from keys through fb until
// stopped or limit passes, pacing each call by pace.
type figureLoad struct {
	stop            atomic.Bool
	wg              sync.WaitGroup
	mu              sync.Mutex
	fresh, degraded []time.Time // ends of the decisions of each kind
	calls, failed   atomic.Int64
}

func startFigureLoad(fb *fallback.Store, rule algorithms.Rule, callers, keys int, pace, limit time.Duration) *figureLoad {
	l := &figureLoad{}
	deadline := time.Now().Add(limit)
	prefix := "fig:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	for c := range callers {
		l.wg.Go(func() {
			for i := 0; i < 1_000_000 && !l.stop.Load() && time.Now().Before(deadline); i++ {
				key := backend.Key{Prefix: prefix, ID: strconv.Itoa((c*7 + i) % keys)}
				res, err := fb.Take(context.Background(), backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1})
				end := time.Now()
				l.calls.Add(1)
				l.mu.Lock()
				switch {
				case err != nil:
					l.failed.Add(1)
				case res.Degraded:
					l.degraded = append(l.degraded, end)
				default:
					l.fresh = append(l.fresh, end)
				}
				l.mu.Unlock()
				time.Sleep(pace)
			}
		})
	}
	return l
}

func (l *figureLoad) finish() {
	l.stop.Store(true)
	l.wg.Wait()
}

// freshSince reports whether a non-degraded decision ended after t.
func (l *figureLoad) freshSince(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.fresh) > 0 && l.fresh[len(l.fresh)-1].After(t)
}

type openings struct {
	mu  sync.Mutex
	all []backend.StateChange
}

func (o *openings) hook(c backend.StateChange) {
	o.mu.Lock()
	o.all = append(o.all, c)
	o.mu.Unlock()
}

func (o *openings) count(to backend.BreakerState) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.all {
		if c.To == to {
			n++
		}
	}
	return n
}

// notClosed is how long the breaker was not closed, up to end.
func (o *openings) notClosed(end time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var total time.Duration
	var since time.Time
	for _, c := range o.all {
		switch {
		case c.From == backend.BreakerClosed:
			since = c.At
		case c.To == backend.BreakerClosed && !since.IsZero():
			total += c.At.Sub(since)
			since = time.Time{}
		}
	}
	if !since.IsZero() {
		total += end.Sub(since)
	}
	return total
}

func (o *openings) lastClose() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range slices.Backward(o.all) {
		if c.To == backend.BreakerClosed {
			return c.At
		}
	}
	return time.Time{}
}

func TestBlipFigures(t *testing.T) {
	if os.Getenv("LIMITKIT_BLIP_FIGURES") == "" {
		t.Skip("set LIMITKIT_BLIP_FIGURES=1 to measure the blip figures")
	}
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	const callers, keys = 16, 64
	for _, cl := range itClients {
		t.Run(cl.name+"/stall", func(t *testing.T) {
			srv := redistest.Start(t)
			conn := cl.single(t, srv.Addr())
			var o openings
			fb, err := fallback.New(conn.store, fallback.WithTimeout(100*time.Millisecond),
				fallback.WithLogger(quietLogger()), fallback.WithStateHook(o.hook))
			require.NoError(t, err)
			l := startFigureLoad(fb, rule, callers, keys, time.Millisecond, 30*time.Second)
			defer l.finish()
			waitUntilFor(t, itWait, "decisions from Redis", func() bool { return l.freshSince(time.Now().Add(-50 * time.Millisecond)) })
			srv.Pause()
			pausedAt := time.Now()
			time.Sleep(time.Second) // the stall itself
			srv.Resume()
			resumeAt := time.Now()
			waitUntilFor(t, itWait, "decisions from Redis after the stall", func() bool {
				return fb.State() == backend.BreakerClosed && l.freshSince(resumeAt)
			})
			l.finish()
			var firstFresh, lastDegraded time.Time
			for _, e := range l.fresh {
				if e.After(resumeAt) && (firstFresh.IsZero() || e.Before(firstFresh)) {
					firstFresh = e
				}
			}
			degradedN := 0
			for _, e := range l.degraded {
				if e.After(pausedAt) {
					degradedN++
					if e.After(lastDegraded) {
						lastDegraded = e
					}
				}
			}
			require.False(t, firstFresh.IsZero())
			t.Logf("FIGURE %s 1 s stall: degraded from the stall to %v after SIGCONT (first decision from Redis %v after it, breaker closed %v after it); %d degraded decisions; breaker opened %d times; %d errors",
				cl.name, lastDegraded.Sub(resumeAt).Round(time.Millisecond), firstFresh.Sub(resumeAt).Round(time.Millisecond),
				o.lastClose().Sub(resumeAt).Round(time.Millisecond), degradedN, o.count(backend.BreakerOpen), l.failed.Load())
		})
		t.Run(cl.name+"/loaded", func(t *testing.T) {
			srv := redistest.Start(t)
			conn := cl.single(t, srv.Addr())
			var o openings
			fb, err := fallback.New(conn.store, fallback.WithTimeout(100*time.Millisecond),
				fallback.WithLogger(quietLogger()), fallback.WithStateHook(o.hook))
			require.NoError(t, err)
			// The burner: 2 goroutines per CPU spinning for the run.
			var burn atomic.Bool
			var bwg sync.WaitGroup
			for range 2 * runtime.GOMAXPROCS(0) {
				bwg.Go(func() {
					x := 0
					for !burn.Load() {
						for i := range 1 << 16 {
							x += i
						}
					}
					_ = x
				})
			}
			const run = 8 * time.Second
			l := startFigureLoad(fb, rule, callers, keys, 0, run)
			l.wg.Wait()
			burn.Store(true)
			bwg.Wait()
			st := fb.Stats()
			t.Logf("FIGURE %s loaded %v (16 callers, %d spinning goroutines, healthy Redis, 100 ms deadline): %d decisions from Redis, %d degraded, %d primary failures; breaker opened %d times, not closed for %v",
				cl.name, run, 2*runtime.GOMAXPROCS(0), len(l.fresh), len(l.degraded), st.PrimaryFailures, o.count(backend.BreakerOpen),
				o.notClosed(time.Now()).Round(time.Millisecond))
		})
	}
}

// admitAllOf is a primary that admits every TakeAll at no cost.
type admitAllOf struct{ admitAll }

func (admitAllOf) TakeAll(_ context.Context, reqs []backend.Request) (backend.Result, error) {
	return backend.Result{Allowed: true, Limit: reqs[0].Rule.Limit, Remaining: reqs[0].Rule.Limit}, nil
}

func (admitAllOf) HonoursContext() bool { return true }

// BenchmarkTakeAllDecision measures one fallback TakeAll of two requests
// over a healthy primary that costs nothing: what the store adds (since
// baselines: every request's answer recorded, through a TakeEach of
// the primary even when the caller asked for none).
func BenchmarkTakeAllDecision(b *testing.B) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	s, err := fallback.New(admitAllOf{})
	if err != nil {
		b.Fatal(err)
	}
	reqs := []backend.Request{
		{Key: backend.Key{Prefix: "b:", ID: "k"}, Rule: rule, Now: time.Now(), Cost: 1},
		{Key: backend.Key{Prefix: "c:", ID: "k"}, Rule: rule, Now: time.Now(), Cost: 1},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.TakeAll(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

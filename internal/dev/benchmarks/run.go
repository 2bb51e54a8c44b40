package benchmarks

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// Cell is one contender set up for one workload: its state is kept between
// the calls testing.B makes of a benchmark function (so deny-heavy keys
// stay spent), and it counts every decision made through it.
type Cell struct {
	// Contender and Workload are what the cell runs.
	Contender Contender
	Workload  Workload

	decide  Decider
	release func()
	ids     []string
	seeds   atomic.Uint64

	decisions, admitted, errors atomic.Int64
	firstErr                    atomic.Pointer[error]

	// For deny-heavy workloads: when each key's admissions were asked for
	// (ms, read before the call), warm-up included, to count
	// over-admissions.
	admMu      sync.Mutex
	admissions [][]int64
}

// Callers lists the numbers of concurrent callers the Redis benchmarks run
// with.
var Callers = []int{1, 8, 64}

// WarmupCallers is how many goroutines make the warm-up pass.
const WarmupCallers = 64

// Prepare sets c up for w. For a deny-heavy workload it then makes the
// limit's worth of requests for every key (not counted in Decisions, but
// in the admissions OverAdmissions checks), which spends every key's
// allowance; a never-deny workload starts from empty keys (each is created
// by its first request; use Warm to bring them to their steady state).
// Close the cell when done.
func Prepare(ctx context.Context, c Contender, w Workload) (*Cell, error) {
	decide, release, err := c.New(w)
	if err != nil {
		return nil, errorf(c.Name, "%v", err)
	}
	cell := &Cell{Contender: c, Workload: w, decide: decide, release: release, ids: w.IDs()}
	if !w.Deny {
		return cell, nil
	}
	cell.admissions = make([][]int64, len(cell.ids))
	limit, _ := w.DenyRule()
	total := limit * int64(len(cell.ids))
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(WarmupCallers, w.Keys) {
		wg.Go(func() {
			for j := next.Add(1) - 1; j < total; j = next.Add(1) - 1 {
				i := int(j % int64(len(cell.ids)))
				t := time.Now().UnixMilli()
				ok, err := decide(ctx, cell.ids[i])
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if ok {
					cell.admit(i, t)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		release()
		return nil, errorf(c.Name, "warm-up: %v", *p)
	}
	return cell, nil
}

// Close releases what the contender acquired.
func (c *Cell) Close() { c.release() }

// Decisions, Admitted and Errors count the requests decided through the
// cell's benchmark functions (warm-up excluded), the admitted ones, and
// those that returned an error.
func (c *Cell) Decisions() int64 { return c.decisions.Load() }

// Admitted counts the admitted requests; see Decisions.
func (c *Cell) Admitted() int64 { return c.admitted.Load() }

// Errors counts the requests that returned an error; see Decisions.
func (c *Cell) Errors() int64 { return c.errors.Load() }

// FirstError returns the first error a decision returned, or nil.
func (c *Cell) FirstError() error {
	if p := c.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

// keepError records err as the cell's first error unless there is one. It
// takes err by value, in its own function, so that the address taken here
// does not move every decision's error variable to the heap.
func (c *Cell) keepError(err error) {
	c.firstErr.CompareAndSwap(nil, &err)
}

// worker runs decisions from one goroutine and flushes its counts once.
type worker struct {
	c                   *Cell
	r                   rng
	n, admitted, failed int64
}

func (c *Cell) worker() *worker {
	return &worker{c: c, r: newRng(c.seeds.Add(1))}
}

func (w *worker) decide(ctx context.Context) {
	i := w.r.index(len(w.c.ids))
	var t int64
	if w.c.admissions != nil {
		t = time.Now().UnixMilli()
	}
	ok, err := w.c.decide(ctx, w.c.ids[i])
	if ok && w.c.admissions != nil {
		w.c.admit(i, t)
	}
	w.n++
	switch {
	case err != nil:
		if w.failed == 0 {
			w.c.keepError(err)
		}
		w.failed++
	case ok:
		w.admitted++
	}
}

// tally sums the counts of one benchmark's or run's workers.
type tally struct{ n, admitted, failed atomic.Int64 }

// flush adds the worker's counts to its cell's and to t.
func (w *worker) flush(t *tally) {
	w.c.decisions.Add(w.n)
	w.c.admitted.Add(w.admitted)
	w.c.errors.Add(w.failed)
	t.n.Add(w.n)
	t.admitted.Add(w.admitted)
	t.failed.Add(w.failed)
}

// report adds the share admitted and the errors as benchmark metrics.
func (t *tally) report(b *testing.B) {
	if n := t.n.Load(); n > 0 {
		b.ReportMetric(float64(t.admitted.Load())/float64(n), "admitted/op")
		b.ReportMetric(float64(t.failed.Load())/float64(n), "errors/op")
	}
}

// Serial returns a benchmark of decisions made one after another from one
// goroutine.
func (c *Cell) Serial() func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var t tally
		w := c.worker()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			w.decide(ctx)
		}
		b.StopTimer()
		w.flush(&t)
		t.report(b)
	}
}

// Parallel returns a benchmark of decisions made from GOMAXPROCS
// goroutines with b.RunParallel.
func (c *Cell) Parallel() func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var t tally
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := c.worker()
			for pb.Next() {
				w.decide(ctx)
			}
			w.flush(&t)
		})
		b.StopTimer()
		t.report(b)
	}
}

// Concurrent returns a benchmark of b.N decisions shared by exactly callers
// goroutines (whatever GOMAXPROCS is), the shape of a server with that many
// requests in flight. It is meant for Redis, where a decision waits on the
// network.
func (c *Cell) Concurrent(callers int) func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var next atomic.Int64
		var t tally
		var wg sync.WaitGroup
		b.ReportAllocs()
		b.ResetTimer()
		for range callers {
			wg.Go(func() {
				w := c.worker()
				for next.Add(1) <= int64(b.N) {
					w.decide(ctx)
				}
				w.flush(&t)
			})
		}
		wg.Wait()
		b.StopTimer()
		t.report(b)
	}
}

// admit records an admission of key i asked for at t (ms).
func (c *Cell) admit(i int, t int64) {
	c.admMu.Lock()
	c.admissions[i] = append(c.admissions[i], t)
	c.admMu.Unlock()
}

// OverAdmissions counts the admissions beyond the deny-heavy limit since
// Prepare (warm-up included): for each key, in each aligned window
// (aligned, as fixed_window counts) or in the busiest interval of the
// window's length less a second's slack for the time a call takes
// (otherwise), what exceeds the limit, summed over keys. It is 0 for a
// never-deny workload, whose admissions are not recorded.
func (c *Cell) OverAdmissions(aligned bool) int64 {
	if c.admissions == nil {
		return 0
	}
	limit, window := c.Workload.DenyRule()
	w := window.Milliseconds()
	c.admMu.Lock()
	defer c.admMu.Unlock()
	var over int64
	for _, ts := range c.admissions {
		ts = slices.Clone(ts)
		slices.Sort(ts)
		over += overLimit(ts, limit, w, aligned)
	}
	return over
}

// overLimit counts what the sorted admission times ts hold beyond limit
// per window of w ms: per aligned window, or in the busiest sliding
// interval of w less a slack of up to a second.
func overLimit(ts []int64, limit, w int64, aligned bool) int64 {
	var over int64
	if aligned {
		for i := 0; i < len(ts); {
			j := i
			for j < len(ts) && ts[j]/w == ts[i]/w {
				j++
			}
			over += max(0, int64(j-i)-limit)
			i = j
		}
		return over
	}
	span := w - min(1000, w/2)
	busiest := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for j < len(ts) && ts[j]-ts[i] < span {
			j++
		}
		busiest = max(busiest, j-i)
	}
	return max(0, int64(busiest)-limit)
}

// RunResult is what RunFor measured.
type RunResult struct {
	// Decisions, Admitted and Errors count the requests decided.
	Decisions, Admitted, Errors int64
	// Elapsed is the time from the start to the last caller's return.
	Elapsed time.Duration
}

// PerSecond returns the decisions per second.
func (r RunResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

// RunFor makes decisions from exactly callers goroutines for d (each
// finishes the decision in flight when d is up), the shape of a server
// with that many requests in flight, and counts them: a harness.Loop,
// bounded in time and count whatever the speed, which is what a Redis cell
// needs; warming up is RunFor with the result discarded.
func (c *Cell) RunFor(ctx context.Context, callers int, d time.Duration) RunResult {
	var t tally
	elapsed := harness.Loop(ctx, callers, d, func(int) (func(), func()) {
		w := c.worker()
		return func() { w.decide(ctx) }, func() { w.flush(&t) }
	})
	return RunResult{Decisions: t.n.Load(), Admitted: t.admitted.Load(), Errors: t.failed.Load(), Elapsed: elapsed}
}

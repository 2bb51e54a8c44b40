package benchmarks

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
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
}

// Callers lists the numbers of concurrent callers the Redis benchmarks run
// with.
var Callers = []int{1, 8, 64}

// WarmupCallers is how many goroutines make the warm-up pass.
const WarmupCallers = 64

// Prepare sets c up for w. For a deny-heavy workload it then makes one
// request for every key, not counted, which spends every key's allowance;
// a never-deny workload starts from empty keys (each is created by its
// first measured request). Close the cell when done.
func Prepare(ctx context.Context, c Contender, w Workload) (*Cell, error) {
	decide, release, err := c.New(w)
	if err != nil {
		return nil, errorf(c.Name, "%v", err)
	}
	cell := &Cell{Contender: c, Workload: w, decide: decide, release: release, ids: w.IDs()}
	if !w.Deny {
		return cell, nil
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(WarmupCallers, w.Keys) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(cell.ids)); i = next.Add(1) - 1 {
				if _, err := decide(ctx, cell.ids[i]); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
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
	ok, err := w.c.decide(ctx, w.c.ids[w.r.index(len(w.c.ids))])
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

func (w *worker) flush() {
	w.c.decisions.Add(w.n)
	w.c.admitted.Add(w.admitted)
	w.c.errors.Add(w.failed)
}

// report adds the share admitted and the errors as benchmark metrics.
func report(b *testing.B, n, admitted, failed int64) {
	if n > 0 {
		b.ReportMetric(float64(admitted)/float64(n), "admitted/op")
		b.ReportMetric(float64(failed)/float64(n), "errors/op")
	}
}

// Serial returns a benchmark of decisions made one after another from one
// goroutine.
func (c *Cell) Serial() func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		w := c.worker()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			w.decide(ctx)
		}
		b.StopTimer()
		w.flush()
		report(b, w.n, w.admitted, w.failed)
	}
}

// Parallel returns a benchmark of decisions made from GOMAXPROCS
// goroutines with b.RunParallel.
func (c *Cell) Parallel() func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var n, admitted, failed atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := c.worker()
			for pb.Next() {
				w.decide(ctx)
			}
			w.flush()
			n.Add(w.n)
			admitted.Add(w.admitted)
			failed.Add(w.failed)
		})
		b.StopTimer()
		report(b, n.Load(), admitted.Load(), failed.Load())
	}
}

// Concurrent returns a benchmark of b.N decisions shared by exactly callers
// goroutines (whatever GOMAXPROCS is), the shape of a server with that many
// requests in flight. It is meant for Redis, where a decision waits on the
// network.
func (c *Cell) Concurrent(callers int) func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var next, n, admitted, failed atomic.Int64
		var wg sync.WaitGroup
		b.ReportAllocs()
		b.ResetTimer()
		for range callers {
			wg.Go(func() {
				w := c.worker()
				for next.Add(1) <= int64(b.N) {
					w.decide(ctx)
				}
				w.flush()
				n.Add(w.n)
				admitted.Add(w.admitted)
				failed.Add(w.failed)
			})
		}
		wg.Wait()
		b.StopTimer()
		report(b, n.Load(), admitted.Load(), failed.Load())
	}
}

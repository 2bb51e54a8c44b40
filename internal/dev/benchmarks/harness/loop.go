package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// MaxCallsPerCaller bounds a Loop in count as well as in time: no
// contender answers a caller this often within a cell's seconds.
const MaxCallsPerCaller = 1 << 22

// Loop runs a closed loop from callers goroutines, the shape of a server
// with that many requests in flight: goroutine i gets its step from
// start(i) and calls it, each call after the previous one returned, until
// d has passed, ctx ends or it made MaxCallsPerCaller calls (the call in
// flight when d is up finishes); then it calls its done, where it hands
// over what it counted. Loop returns the time from its start to the last
// caller's return.
func Loop(ctx context.Context, callers int, d time.Duration, start func(caller int) (step, done func())) time.Duration {
	var stop atomic.Bool
	t0 := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	unhook := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unhook()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			step, done := start(i)
			for n := 0; n < MaxCallsPerCaller && !stop.Load(); n++ {
				step()
			}
			done()
		})
	}
	wg.Wait()
	return time.Since(t0)
}

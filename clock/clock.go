// Package clock abstracts the reading of time so that limiters can be driven by
// a fake clock in tests.
//
// limitkit reads the clock once per request, in the limiter, and passes that
// instant down to the store; stores never read time themselves. Swapping the
// clock therefore changes every decision consistently.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the current time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// System is the wall clock of this machine. It reads time.Now at most once
// per anchorPeriod and, in between, adds the monotonic time elapsed since
// (one clock read instead of time.Now's two). A step of the wall clock (NTP,
// an operator) is therefore followed within a second; until then times keep
// advancing at the monotonic rate, which every algorithm handles like any
// clock difference between callers.
var System Clock = &systemClock{}

// anchorPeriod bounds how long System takes to follow a wall-clock step.
const anchorPeriod = time.Second

// Both the clock and its anchor fill a cache line, so that each is an
// allocation on a line of its own: every request reads them, and a
// neighbour written often would evict them.
type systemClock struct {
	anchor atomic.Pointer[anchor]
	_      [56]byte
}

// anchor is a time.Now reading (with its monotonic part) and its Unix
// nanoseconds, never modified once stored.
type anchor struct {
	t    time.Time
	nano int64
	_    [32]byte
}

func (c *systemClock) Now() time.Time {
	a, d := c.read()
	return a.t.Add(d)
}

// unixMilli is Now().UnixMilli() without building the time.Time.
func (c *systemClock) unixMilli() int64 {
	a, d := c.read()
	return a.millisAfter(d)
}

// millisAfter is a.t.Add(d).UnixMilli().
func (a *anchor) millisAfter(d time.Duration) int64 {
	return floorDiv(a.nano+int64(d), int64(time.Millisecond))
}

// read returns a fresh anchor and the monotonic time elapsed since it.
func (c *systemClock) read() (*anchor, time.Duration) {
	if a := c.anchor.Load(); a != nil {
		if d := time.Since(a.t); d < anchorPeriod {
			return a, d
		}
	}
	t := time.Now()
	a := &anchor{t: t, nano: t.UnixNano()}
	c.anchor.Store(a)
	return a, 0
}

// floorDiv is a/b rounded down (b > 0), as time.Time.UnixMilli rounds.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// UnixMilli returns c's current time in whole milliseconds since the Unix
// epoch, c.Now().UnixMilli(): the unit every decision is made in. For
// System it skips building a time.Time (the limiter reads it once per
// decision); other clocks are read with Now.
func UnixMilli(c Clock) int64 {
	if s, ok := c.(*systemClock); ok {
		return s.unixMilli()
	}
	return c.Now().UnixMilli()
}

// Timer is implemented by clocks that also measure waits, so that code
// which sleeps (limiter.Wait) follows the clock it reads. Fake implements it;
// for other clocks, After falls back to real time.
type Timer interface {
	// After returns a channel that receives the clock's time once d has
	// passed on it.
	After(d time.Duration) <-chan time.Time
}

// After waits on c when c is a Timer and on real time otherwise.
func After(c Clock, d time.Duration) <-chan time.Time {
	if t, ok := c.(Timer); ok {
		return t.After(d)
	}
	return time.After(d)
}

// Fake is a manually driven clock for tests. Its zero value reads the zero
// time; use NewFake to start it elsewhere. It is safe for concurrent use.
type Fake struct {
	// now is read without the lock (every decision of a test reads it);
	// mu orders the moves and guards the waiters.
	now     atomic.Pointer[time.Time]
	mu      sync.Mutex
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock that reads t until it is moved.
func NewFake(t time.Time) *Fake {
	f := &Fake{}
	f.now.Store(&t)
	return f
}

// Now returns the fake clock's current time: one atomic load, no lock.
func (f *Fake) Now() time.Time {
	if t := f.now.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Advance moves the clock by d; a negative d moves it back.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set(f.Now().Add(d))
}

// Set moves the clock to t, forwards or back.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set(t)
}

// After returns a channel that receives the fake time once the clock has
// been moved d past the current time.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	now := f.Now()
	w := waiter{at: now.Add(d), ch: ch}
	if d <= 0 {
		ch <- now
		return ch
	}
	f.waiters = append(f.waiters, w)
	return ch
}

// Waiters returns how many After channels have not fired yet; tests use it
// to know that a goroutine is waiting before they move the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// set moves the clock to t and fires the waiters it reached; f.mu is
// held.
func (f *Fake) set(t time.Time) {
	f.now.Store(&t)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if t.Before(w.at) {
			kept = append(kept, w)
		} else {
			w.ch <- t
		}
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
}

var (
	_ Clock = (*systemClock)(nil)
	_ Clock = (*Fake)(nil)
	_ Timer = (*Fake)(nil)
)

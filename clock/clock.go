// Package clock abstracts the reading of time so that limiters can be driven by
// a fake clock in tests.
//
// limitkit reads the clock once per request, in the limiter, and passes that
// instant down to the store; stores never read time themselves. Swapping the
// clock therefore changes every decision consistently.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// System is the wall clock of this machine (time.Now).
var System Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Fake is a manually driven clock for tests. Its zero value reads the zero
// time; use NewFake to start it elsewhere. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a fake clock that reads t until it is moved.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t}
}

// Now returns the fake clock's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock by d; a negative d moves it back.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Set moves the clock to t, forwards or back.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

var (
	_ Clock = systemClock{}
	_ Clock = (*Fake)(nil)
)

package clock

import (
	"testing"
	"time"
)

func TestSystemReanchorsWhenStale(t *testing.T) {
	c := &systemClock{}
	stale := &anchor{t: time.Now().Add(-2 * anchorPeriod)}
	c.anchor.Store(stale)
	before := time.Now()
	got := c.Now()
	if got.Before(before) {
		t.Fatalf("got %v, before %v", got, before)
	}
	if c.anchor.Load() == stale {
		t.Fatal("the stale anchor was kept")
	}
}

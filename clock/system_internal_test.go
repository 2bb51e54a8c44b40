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

// TestSystemMillisMatchNow checks the millisecond reading against
// time.Time's own conversion, sub-millisecond edges and times before the
// epoch included. Control: truncating division (not floor) is caught.
func TestSystemMillisMatchNow(t *testing.T) {
	bases := []time.Time{time.Now(), time.Unix(1_700_000_000, 999_999_999), time.Unix(-1, 500_000), time.Unix(0, 0)}
	ds := []time.Duration{0, 1, 499_999, 500_000, 999_999, time.Millisecond, 3*time.Millisecond + 1, 999 * time.Millisecond}
	truncated := 0
	for _, b := range bases {
		a := &anchor{t: b, nano: b.UnixNano()}
		for _, d := range ds {
			want := b.Add(d).UnixMilli()
			if got := a.millisAfter(d); got != want {
				t.Errorf("anchor %v + %v: %d ms, want %d", b, d, got, want)
			}
			if (a.nano+int64(d))/int64(time.Millisecond) != want {
				truncated++
			}
		}
	}
	if truncated == 0 {
		t.Error("control: truncating division agreed everywhere; the cases miss times before the epoch")
	}
	// The exported reading lies between two readings of Now.
	for range 1000 {
		before := System.Now().UnixMilli()
		got := UnixMilli(System)
		after := System.Now().UnixMilli()
		if got < before || got > after {
			t.Fatalf("UnixMilli(System) = %d, outside [%d, %d]", got, before, after)
		}
	}
	f := NewFake(time.UnixMilli(1234))
	if got := UnixMilli(f); got != 1234 {
		t.Errorf("UnixMilli(fake at 1234 ms) = %d", got)
	}
}

package rlsbench

import (
	"context"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
	"github.com/limitkit/limitkit/rls"
)

// fleet starts the reference algorithm and limitkit-rls (fixed windows, on
// client's store, with opts) on one Redis under 20 per hour, and returns
// their callers with a request of one descriptor.
func fleet(t *testing.T, srv *harness.Server, client string, opts ...rls.Option) (ref, lk Caller, req func() bool) {
	t.Helper()
	spec := Spec{Unit: "hour", RequestsPerUnit: 20}
	ref, closeRef, err := startReference(client, srv.Addr(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRef)
	lk, closeLK, err := startLimitkit(client, srv.Addr(), spec, algorithms.FixedWindow, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLK)
	start := time.Now()
	// sameHour reports whether the calls so far fell in one window.
	return ref, lk, func() bool { return start.Truncate(time.Hour).Equal(time.Now().Truncate(time.Hour)) }
}

// admitted sends n calls of one descriptor through each caller in turn
// (calls[i%len(calls)]) and returns how many each admitted.
func admitted(t *testing.T, n int, calls ...Caller) []int {
	t.Helper()
	req := newRequest(1)
	req.Descriptors[0].Entries[0].Value = "shared"
	got := make([]int, len(calls))
	for i := range n {
		over, err := calls[i%len(calls)](context.Background(), req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !over {
			got[i%len(calls)]++
		}
	}
	return got
}

// A fleet in the middle of a swap: reference pods and limitkit-rls pods on
// one Redis count in the same keys, so requests alternating between them
// are admitted at most the limit in total, and after 10 through the
// reference limitkit-rls admits only the 10 left of 20. The control gives
// limitkit-rls another key prefix (CACHE_KEY_PREFIX): counting apart, the
// two admit twice the limit, which shows the test can tell.
func TestMixedFleetSharesCounts(t *testing.T) {
	srv := startServer(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				if err := srv.FlushAll(context.Background()); err != nil {
					t.Fatal(err)
				}
				ref, lk, sameHour := fleet(t, srv, client)
				alternating := admitted(t, 50, ref, lk)
				if err := srv.FlushAll(context.Background()); err != nil {
					t.Fatal(err)
				}
				first := admitted(t, 10, ref)
				then := admitted(t, 30, lk)
				if !sameHour() && attempt == 0 {
					continue // an hour boundary reset the windows: again
				}
				if total := alternating[0] + alternating[1]; total != 20 {
					t.Errorf("alternating: reference admitted %d, limitkit-rls %d: %d in all; want 20", alternating[0], alternating[1], total)
				}
				if first[0] != 10 || then[0] != 10 {
					t.Errorf("10 through the reference admitted %d, then limitkit-rls admitted %d of 30; want 10 and the 10 left of 20", first[0], then[0])
				}
				break
			}
		})
	}
	t.Run("control: separate keys", func(t *testing.T) {
		for attempt := 0; ; attempt++ {
			if err := srv.FlushAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			ref, lk, sameHour := fleet(t, srv, GoRedis, rls.WithKeyPrefix("apart_"))
			got := admitted(t, 50, ref, lk)
			if !sameHour() && attempt == 0 {
				continue
			}
			if total := got[0] + got[1]; total != 40 {
				t.Errorf("counting apart: %d + %d = %d admitted; want 40 (the limit twice), or the test cannot tell", got[0], got[1], total)
			}
			break
		}
	})
}

// A charge cell (Spec.Charge) records every charge where the reference
// counts: five requests charging 5 hits each under 20 per hour leave 25 in
// the reference's key (the last one is debt). The control sends the same
// hits with Spec.Charge 0 (not a charged domain): the fifth is refused
// and consumes nothing, 20.
func TestChargeCellCountsHits(t *testing.T) {
	srv := startServer(t)
	for _, tc := range []struct {
		charge uint32
		want   int64
	}{{5, 25}, {0, 20}} {
		for attempt := 0; ; attempt++ {
			if err := srv.FlushAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			lk, closeLK, err := startLimitkit(Rueidis, srv.Addr(), Spec{Unit: "hour", RequestsPerUnit: 20, Charge: tc.charge}, algorithms.FixedWindow)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			req := newRequest(1)
			req.HitsAddend = 5
			req.Descriptors[0].Entries[0].Value = "shared"
			for i := range 5 {
				if _, err := lk(context.Background(), req); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			closeLK()
			key := floorKey(req.Descriptors[0], start.Unix(), int64(time.Hour/time.Second))
			got, err := srv.Client().Get(context.Background(), key).Int64()
			if !start.Truncate(time.Hour).Equal(time.Now().Truncate(time.Hour)) && attempt == 0 {
				continue // an hour boundary: again
			}
			if err != nil || got != tc.want {
				t.Errorf("charge %d: %s holds %d (%v); want %d", tc.charge, key, got, err, tc.want)
			}
			break
		}
	}
}

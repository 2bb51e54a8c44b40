package rlsbench

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// Load is what the callers of a cell send: requests of Descriptors
// descriptors (the first of DescriptorKeys), each value drawn uniformly
// from Keys ids, from Callers goroutines in a closed loop; with Hits above
// 0, each request's hits_addend (else unset: one hit).
type Load struct {
	Descriptors, Keys, Callers int
	Hits                       uint32
}

// Drive is the outcome of driving a caller.
type Drive struct {
	// Decisions counts the calls made, Errors those that failed, Denied
	// those answered OVER_LIMIT overall.
	Decisions, Errors, Denied int64
	// FirstError is the first call's error, or nil.
	FirstError error
	// Elapsed is the time from the first call to the last answer.
	Elapsed time.Duration
	// P50 and P99 are percentiles of the calls' latencies, as the caller
	// saw them.
	P50, P99 time.Duration
}

// DriveFor calls call from l.Callers goroutines in a harness.Loop until d
// has passed (or harness.MaxCallsPerCaller calls each, or ctx ends), each
// call waiting for the previous one.
func DriveFor(ctx context.Context, call Caller, l Load, d time.Duration) Drive {
	var (
		out      Drive
		mu       sync.Mutex
		lats     []time.Duration
		firstErr atomic.Pointer[error]
	)
	seed := uint64(time.Now().UnixNano())
	out.Elapsed = harness.Loop(ctx, l.Callers, d, func(caller int) (func(), func()) {
		r := rand.New(rand.NewPCG(uint64(caller)+1, seed))
		req := newRequest(l.Descriptors)
		req.HitsAddend = l.Hits
		my := make([]time.Duration, 0, 4096)
		var n, errs, denied int64
		step := func() {
			for _, d := range req.Descriptors {
				d.Entries[0].Value = strconv.Itoa(r.IntN(l.Keys))
			}
			t0 := time.Now()
			over, err := call(ctx, req)
			my = append(my, time.Since(t0))
			n++
			switch {
			case err != nil:
				errs++
				firstErr.CompareAndSwap(nil, &err)
			case over:
				denied++
			}
		}
		done := func() {
			mu.Lock()
			out.Decisions += n
			out.Errors += errs
			out.Denied += denied
			lats = append(lats, my...)
			mu.Unlock()
		}
		return step, done
	})
	if p := firstErr.Load(); p != nil {
		out.FirstError = *p
	}
	slices.Sort(lats)
	out.P50, out.P99 = percentile(lats, 0.50), percentile(lats, 0.99)
	return out
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// newRequest returns a request of n descriptors of one entry each, whose
// values the caller fills in.
func newRequest(n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: Domain}
	for _, k := range DescriptorKeys[:n] {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k}}})
	}
	return req
}

package rls

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/limitkit/limitkit/backend"
)

const negativeYAML = `
domain: n
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: counter
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_counter}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}
  - key: compact
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: compact_log}
  - key: two
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: two_level}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra}
`

// negative returns a descriptor giving hits back.
func negative(d *ratelimitv3.RateLimitDescriptor, hits uint64) *ratelimitv3.RateLimitDescriptor {
	d = withHits(d, hits)
	d.IsNegativeHits = true
	return d
}

// checkNegativeHits: on every algorithm a negative hit gives its units
// back (never beyond the limit; on the counters never to a window gone
// by), and it never refuses, even at a full limit.
func checkNegativeHits(t *testing.T, store backend.Store) {
	h := newHarness(t, store, negativeYAML)
	h.clk.Advance(10 * time.Second) // inside the minute
	for _, key := range []string{"fixed", "counter", "log", "compact", "two", "bucket"} {
		h.call(request("n", 6, desc(key, "v")))
		expect(t, key+": 3 back", h.call(request("n", 0, negative(desc(key, "v"), 3))).GetStatuses()[0], ok, 7, -1)
		expect(t, key+": after", h.call(request("n", 0, desc(key, "v"))).GetStatuses()[0], ok, 6, -1)
		expect(t, key+": 50 back", h.call(request("n", 0, negative(desc(key, "v"), 50))).GetStatuses()[0], ok, 10, -1)
		expect(t, key+": full again", h.call(request("n", 10, desc(key, "v"))).GetStatuses()[0], ok, 0, -1)
		resp := h.call(request("n", 0, negative(desc(key, "v"), 0)))
		if resp.GetOverallCode() != ok {
			t.Errorf("%s: a negative hit at a full limit refused: %v", key, resp)
		}
		expect(t, key+": 0 back at a full limit", resp.GetStatuses()[0], ok, 0, -1)
		if resp := h.call(request("n", 0, desc(key, "v"))); resp.GetOverallCode() != over {
			t.Errorf("%s: admitted after giving 0 back at a full limit: %v", key, resp)
		}
	}
	// The next minute: the fixed window's units of the last one are not
	// given back into it (it starts empty and stays so).
	h.clk.Advance(time.Minute)
	h.call(request("n", 2, desc("fixed", "v")))
	expect(t, "new window: 9 back", h.call(request("n", 0, negative(desc("fixed", "v"), 9))).GetStatuses()[0], ok, 10, -1)
}

func TestNegativeHits(t *testing.T) { checkNegativeHits(t, memStore(t)) }

// unwrapper is a wrapper that has no GiveBack of its own: the service
// finds the store's under it.
type unwrapper struct{ backend.Store }

func (u unwrapper) Unwrap() backend.Store { return u.Store }

func TestNegativeHitsUnderAWrapper(t *testing.T) { checkNegativeHits(t, unwrapper{memStore(t)}) }

// The control: on a store that cannot give back, the counters' units stay
// taken, which the check's expectation (7 left) tells apart.
func TestNegativeHitsControlWithoutGiveBack(t *testing.T) {
	h := newHarness(t, struct{ backend.Store }{memStore(t)}, negativeYAML)
	h.clk.Advance(10 * time.Second)
	h.call(request("n", 6, desc("fixed", "v")))
	st := h.call(request("n", 0, negative(desc("fixed", "v"), 3))).GetStatuses()[0]
	if st.GetLimitRemaining() == 7 {
		t.Fatal("7 left on a store without GiveBack: the check could not tell a refund from none")
	}
	expect(t, "no refund", st, ok, 4, -1)
}

package rls

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The reference server's documented behaviours, restated.

const basicYAML = `
domain: basic
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: key2
    rate_limit:
      unit: Minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: HOUR
      requests_per_unit: 10
  - key: parent
    descriptors:
      - key: child
        rate_limit:
          unit: minute
          requests_per_unit: 2
  - key: free
    rate_limit:
      unlimited: true
`

func TestUnknownDomainIsOK(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	resp := h.call(request("nowhere", 0, desc("key1", "value1")))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCode() != ok || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("unknown domain: %v", resp)
	}
	// A descriptor that matches no rule is OK too, with no limit.
	resp = h.call(request("basic", 0, desc("key1", "other")))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("unmatched descriptor: %v", resp)
	}
}

func TestFiftyPerSecondLeaves49(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	resp := h.call(request("basic", 0, desc("key1", "value1")))
	st := resp.GetStatuses()[0]
	expect(t, "first", st, ok, 49, time.Second)
	if l := st.GetCurrentLimit(); l.GetRequestsPerUnit() != 50 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("current_limit %v; want 50 per second", l)
	}
}

func TestTwentyPerMinuteRefusesThe21st(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	h.clk.Advance(15 * time.Second)
	for i := range 20 {
		resp := h.call(request("basic", 0, desc("key2", "any")))
		expect(t, "admitted", resp.GetStatuses()[0], ok, uint32(19-i), 45*time.Second)
	}
	resp := h.call(request("basic", 0, desc("key2", "any")))
	if resp.GetOverallCode() != over {
		t.Fatalf("21st: overall %v; want OVER_LIMIT", resp.GetOverallCode())
	}
	expect(t, "21st", resp.GetStatuses()[0], over, 0, 45*time.Second)
	// The key alone matches per value: another value has its own count.
	expect(t, "other value", h.call(request("basic", 0, desc("key2", "else"))).GetStatuses()[0], ok, 19, -1)
	// A new window admits again.
	h.clk.Advance(45 * time.Second)
	expect(t, "next minute", h.call(request("basic", 0, desc("key2", "any"))).GetStatuses()[0], ok, 19, time.Minute)
}

func TestMinuteAndHourInOneRequestIsOverLimit(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	both := func() *rlsv3.RateLimitResponse {
		return h.call(request("basic", 0, desc("key2", "a"), desc("key3", "a")))
	}
	for range 10 {
		if resp := both(); resp.GetOverallCode() != ok {
			t.Fatalf("within both limits: %v", resp)
		}
	}
	resp := both()
	if resp.GetOverallCode() != over {
		t.Fatalf("11th: overall %v; want OVER_LIMIT", resp.GetOverallCode())
	}
	// The minute limit admits alone, and this refused request consumed
	// none of it: 20 - 10 left.
	expect(t, "minute", resp.GetStatuses()[0], ok, 10, -1)
	expect(t, "hour", resp.GetStatuses()[1], over, 0, time.Hour)
}

func TestNestedMatchesOnlyTheWholeDescriptor(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	cases := []struct {
		name    string
		entries []string
		limited bool
	}{
		{"parent and child", []string{"parent", "p", "child", "c"}, true},
		{"parent alone reaches no limit", []string{"parent", "p"}, false},
		{"deeper than the config", []string{"parent", "p", "child", "c", "more", "m"}, false},
		{"a limit on a non-last entry", []string{"key1", "value1", "child", "c"}, false},
	}
	for _, c := range cases {
		resp := h.call(request("basic", 0, desc(c.entries...)))
		if got := resp.GetStatuses()[0].GetCurrentLimit() != nil; got != c.limited {
			t.Errorf("%s: limited %v; want %v", c.name, got, c.limited)
		}
	}
}

func TestUnlimited(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	for range 3 {
		resp := h.call(request("basic", 0, desc("free", "x")))
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != ok || st.GetCode() != ok || st.GetLimitRemaining() != math.MaxUint32 || st.GetCurrentLimit() != nil {
			t.Fatalf("unlimited: %v", resp)
		}
	}
	if s := h.takeStats(); len(s) != 0 {
		t.Errorf("unlimited reported stats %v; it is counted nowhere", s)
	}
}

func TestShadowModeRule(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	h.call(request("d", 0, desc("k", "v")))
	h.takeStats()
	resp := h.call(request("d", 0, desc("k", "v"), desc("e", "v")))
	if resp.GetOverallCode() != ok {
		t.Fatalf("shadow over limit refused the request: %v", resp)
	}
	expect(t, "shadow", resp.GetStatuses()[0], ok, 0, time.Minute)
	expect(t, "enforced", resp.GetStatuses()[1], ok, 4, time.Minute)
	stats := h.takeStats()
	if len(stats) != 2 || stats[0].Outcome != Shadow || stats[0].Key != "d.k" || stats[1].Outcome != Within {
		t.Errorf("stats %+v; want the shadow rule reported as shadow_mode", stats)
	}
}

func TestGlobalShadowMode(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML, WithShadowMode(true))
	for range 10 {
		h.call(request("basic", 0, desc("key3", "g")))
	}
	resp := h.call(request("basic", 0, desc("key3", "g")))
	if resp.GetOverallCode() != ok {
		t.Fatalf("global shadow: overall %v; want OK", resp.GetOverallCode())
	}
	// The status still says what enforcement would have said.
	expect(t, "status", resp.GetStatuses()[0], over, 0, time.Hour)
}

func TestReplaces(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: tier
    value: basic
    rate_limit: {unit: minute, requests_per_unit: 1, name: basic}
  - key: tier
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: basic
`)
	h.call(request("d", 0, desc("tier", "basic")))
	// Alone, basic refuses its second request.
	if resp := h.call(request("d", 0, desc("tier", "basic"))); resp.GetOverallCode() != over {
		t.Fatalf("basic alone: %v", resp)
	}
	// With gold in the request, basic is not checked.
	resp := h.call(request("d", 0, desc("tier", "basic"), desc("tier", "gold")))
	if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("replaced: %v", resp)
	}
	expect(t, "gold", resp.GetStatuses()[1], ok, 99, -1)
}

func TestWildcards(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: d
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /v*/users/*/avatar
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/exact
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4}
`)
	cases := []struct {
		path string
		want uint32 // the limit applied
	}{
		{"/api/x", 1},
		{"/api/", 1},
		{"/v2/users/7/avatar", 2},
		{"/v/users//avatar", 2},
		{"/v2/users/7/avatars", 4},
		{"/api/exact", 3}, // exact before wildcard
		{"/other", 4},     // then the key alone
	}
	for _, c := range cases {
		st := h.call(request("d", 0, desc("path", c.path))).GetStatuses()[0]
		if got := st.GetCurrentLimit().GetRequestsPerUnit(); got != c.want {
			t.Errorf("%s: limit %d; want %d", c.path, got, c.want)
		}
	}
	// A wildcard rule counts each value apart, as the reference does.
	if st := h.call(request("d", 0, desc("path", "/api/y"))).GetStatuses()[0]; st.GetCode() != ok {
		t.Errorf("/api/y shares /api/x's count: %v", st)
	}
}

package rls

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/limitkit/limitkit/backend"
)

// peekCounter counts the Peeks that reach a store; noEach also drops
// each from TakeEach, as a store that cannot tell does.
type peekCounter struct {
	backend.Store
	noEach bool
	peeks  *atomic.Int64
}

func (p peekCounter) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	p.peeks.Add(1)
	return p.Store.Peek(ctx, req)
}

func (p peekCounter) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	res, each, err := backend.TakeEach(ctx, p.Store, reqs)
	if p.noEach {
		each = nil
	}
	return res, each, err
}

const eachYAML = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
  - key: c
    rate_limits:
      - {unit: second, requests_per_unit: 3, algorithm: gcra}
      - {unit: hour, requests_per_unit: 9, algorithm: sliding_counter}
`

// With each (backend.TakeEach) the service reads every limit's status from the
// TakeAll alone, no Peek, and answers exactly what the peeks answer: the
// same statuses, admitted and refused, on a store that gives Each and on
// one that does not (the control: that one is peeked).
func TestStatusesFromEachNeedNoPeek(t *testing.T) {
	var withPeeks, withoutPeeks atomic.Int64
	with := newHarness(t, peekCounter{Store: memStore(t), peeks: &withPeeks}, eachYAML)
	without := newHarness(t, peekCounter{Store: memStore(t), noEach: true, peeks: &withoutPeeks}, eachYAML)
	reqs := []struct {
		hits  uint32
		descs []string // values of a, b, c; "" leaves the descriptor out
	}{
		{0, []string{"x", "y", "z"}},
		{2, []string{"x", "y", "z"}},
		{0, []string{"x", "", "z"}},
		{0, []string{"x", "y", "z"}}, // b's 4th: admitted; c's 3/s is full
		{0, []string{"x", "y", ""}},
		{1, []string{"x", "y", "z"}},
		{3, []string{"x", "", "z"}},
	}
	refused := 0
	for step := range 3 {
		for i, r := range reqs {
			req := request("d", r.hits)
			for k, v := range r.descs {
				if v != "" {
					req.Descriptors = append(req.Descriptors, desc(string(rune('a'+k)), v))
				}
			}
			got, want := with.call(req), without.call(req)
			if !proto.Equal(got, want) {
				t.Fatalf("round %d request %d: from Each\n%v\nfrom peeks\n%v", step, i, got, want)
			}
			if got.GetOverallCode() == over {
				refused++
			}
		}
		with.clk.Advance(700 * time.Millisecond)
		without.clk.Advance(700 * time.Millisecond)
	}
	if refused == 0 || refused == 3*len(reqs) {
		t.Fatalf("%d of %d requests refused; the sequence must have both", refused, 3*len(reqs))
	}
	if n := withPeeks.Load(); n != 0 {
		t.Errorf("%d peeks on a store that gives Each; want 0", n)
	}
	if withoutPeeks.Load() == 0 {
		t.Error("no peeks on a store without Each: the control does not exercise the peek path")
	}
}

package modeltest

import (
	"context"
	"testing"

	"github.com/limitkit/limitkit/algorithms"
)

// TestModelCoversEveryAlgorithm walks the registry: the model checks every
// registered algorithm, as its descriptor's Accuracy says (TestModel
// drives every name in the registry, TestLimiterModel and TestBlipModel
// every one that holds no leases), and the check is the one its promise
// calls for.
func TestModelCoversEveryAlgorithm(t *testing.T) {
	want := map[algorithms.Accuracy]check{
		algorithms.Exact:            checkExact,
		algorithms.NeverOver:        checkNeverOver,
		algorithms.PerAlignedWindow: checkAligned,
		algorithms.Approximate:      checkApproximate,
	}
	for _, a := range algorithms.Algorithms() {
		c, err := checkOf(a)
		if err != nil {
			t.Errorf("%s: %v", a.Name, err)
			continue
		}
		w := want[a.Accuracy]
		if a.HoldsLeases() {
			w = checkLeases
		}
		if c != w {
			t.Errorf("%s (%v): the model checks %d, want %d", a.Name, a.Accuracy, c, w)
		}
		if r := newRun(context.Background(), newMemory(t), a.Name, "cover:", 1); r.check != c {
			t.Errorf("%s: a run checks %d, want %d", a.Name, r.check, c)
		}
	}
}

// TestCoversRefusesAnUnknownPromise is the control: a row with no
// Accuracy, or a lease-holding one that is not Exact, is refused by the
// model (and by Drive), never driven unchecked.
func TestCoversRefusesAnUnknownPromise(t *testing.T) {
	none := *algorithms.Lookup(algorithms.GCRA)
	none.Accuracy = 0
	lease := *algorithms.Lookup(algorithms.Concurrency)
	lease.Accuracy = algorithms.Approximate
	for i, a := range []*algorithms.Algorithm{&none, &lease, nil} {
		if err := Covers(a); err == nil {
			t.Errorf("Covers of row %d (no Accuracy, a lease not Exact, nil) = nil, want an error", i)
		}
	}
	if err := Drive(context.Background(), newMemory(t), "leaky_bucket", "cover:", 1, 10); err == nil {
		t.Error("Drive of an unregistered algorithm: nil error")
	}
}

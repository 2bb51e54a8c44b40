package modeltest

import (
	"context"
	"testing"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// TestChargeModelCatchesForgottenCharges is the control of ChargeN in the
// alphabet (charge.go, driven by TestReserveModel on every stack): a store
// that answers a charge as recorded but records nothing is caught by the
// same runs, on an exact and on the never-over algorithm.
func TestChargeModelCatchesForgottenCharges(t *testing.T) {
	for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.TwoLevel} {
		t.Run(string(alg), func(t *testing.T) {
			caught := 0
			const tries = 10
			for i := range tries {
				m, err := memorystore.New()
				if err != nil {
					t.Fatal(err)
				}
				r := newRun(context.Background(), forgetfulCharger{m}, alg, "control:", uint64(i))
				if err := r.withReservations(); err != nil {
					t.Fatal(err)
				}
				if err := r.Steps(1500); err != nil {
					caught++
					if caught == 1 {
						t.Logf("caught (seed %d): %v", i, err)
					}
				}
			}
			if caught < tries {
				t.Fatalf("the forgetful charger passed %d of %d runs: the model cannot see it", tries-caught, tries)
			}
		})
	}
}

// forgetfulCharger answers a charge as its Peek does (what it would leave)
// and records nothing.
type forgetfulCharger struct{ *memorystore.Store }

func (s forgetfulCharger) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if req.Charge {
		return s.Peek(ctx, req)
	}
	return s.Store.Take(ctx, req)
}

package modeltest

import (
	"context"
	"testing"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// TestReserveModel drives reservations (ReserveN, Settle below, at and
// above the estimate, Cancel, expiry) with the limiter's other calls, on
// every store and stack, against the model and the reservations' bound:
// in every window the units counted, less the settled excesses, are at
// most the largest limit in force.
func TestReserveModel(t *testing.T) {
	runEveryStack(t, "rsvmodel", rateAlgorithms(nil), 400, (*run).withReservations)
}

// TestReserveModelCatchesNewestRefund is the control: a store whose
// refunds give back the newest units counted (GiveBack) instead of the
// reservation's own is caught by the same runs, as is one whose settles
// forget to refund.
func TestReserveModelCatchesNewestRefund(t *testing.T) {
	for name, mk := range map[string]func(*memorystore.Store) backend.Store{
		"newest units": func(m *memorystore.Store) backend.Store { return newestRefunder{m} },
		"no refund":    func(m *memorystore.Store) backend.Store { return forgetfulRefunder{m} },
	} {
		t.Run(name, func(t *testing.T) {
			caught := 0
			const tries = 10
			for i := range tries {
				m, err := memorystore.New()
				if err != nil {
					t.Fatal(err)
				}
				r := newRun(context.Background(), mk(m), algorithms.SlidingLog, "control:", uint64(i))
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
				t.Fatalf("the %s refunder passed %d of %d runs: the model cannot see it", name, tries-caught, tries)
			}
		})
	}
}

// newestRefunder gives a reservation's refund back from the newest units.
type newestRefunder struct{ *memorystore.Store }

func (s newestRefunder) Unreserve(ctx context.Context, req backend.Request, _ int64) (backend.Result, error) {
	return s.GiveBack(ctx, req)
}

// forgetfulRefunder gives nothing back.
type forgetfulRefunder struct{ *memorystore.Store }

func (s forgetfulRefunder) Unreserve(ctx context.Context, req backend.Request, _ int64) (backend.Result, error) {
	return s.Peek(ctx, req)
}

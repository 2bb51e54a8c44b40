package backend

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/algorithms"
)

// Reserver is a store that can give back the units of one admission of its
// own, where that admission recorded them (limiter.Reservation: reserve an
// estimate, settle the actual cost): both Redis stores, *memorystore.Store,
// and the wrappers of this module, which forward it (package fallback and
// package backend/denycache say what they add). Find it with As.
//
// Unlike UnitRefunder.GiveBack, which gives back the newest units counted
// at a time, Unreserve gives back the reservation's own: on the logs,
// giving back newer units than the reservation's would leave its older
// ones to slide out first, and a later window would admit more than the
// limit.
type Reserver interface {
	// Reserve is Take, and also returns where an admitted request
	// recorded its units (algorithms.Rule.ChargedAt; the server's time on
	// a Redis store under server time), for Unreserve; 0 when denied. A
	// rule that holds leases is refused with an error wrapping
	// algorithms.ErrInvalidRequest (release the lease instead).
	Reserve(ctx context.Context, req Request) (res Result, at int64, err error)
	// Unreserve gives back req.Cost of the units an admission of req's
	// key and rule recorded at at (algorithms.Rule.Refund) and reports what
	// a Peek of req at req.Now reports afterwards. Units no longer where
	// they were recorded (slid out, a window passed, gcra admitted since)
	// are not given back: a refund never creates allowance that was not
	// taken.
	Unreserve(ctx context.Context, req Request, at int64) (Result, error)
}

// ValidateReserve reports whether req can be reserved or unreserved: a
// valid request of a rule that holds no leases. The error wraps
// algorithms.ErrInvalidRule or algorithms.ErrInvalidRequest.
func ValidateReserve(req *Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if req.Rule.HoldsLeases() {
		return fmt.Errorf("%w: %s holds leases; a lease is reserved by Take and given back by Release, not Unreserve",
			algorithms.ErrInvalidRequest, req.Rule.Algorithm)
	}
	return nil
}

package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/backend"
)

// Bounds on one request's fan-out. The limits a request enforces go to
// the store in one TakeAll (at most backend.MaxRequests); checks (hits 0),
// negative hits and shadow limits are each a store call of their own, so
// their number is bounded too, or one request of thousands of checks
// would hold the service for seconds and slow every other caller. Envoy's
// filter sends one descriptor per rate limit action of a route: a few.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 256
	// MaxSeparateCalls is the most checks, negative hits and shadow limits
	// one request may decide (each a store call of its own).
	MaxSeparateCalls = 64
)

// checkDescriptors refuses a request of more than MaxDescriptors
// descriptors before any is matched.
func checkDescriptors(req *rlsv3.RateLimitRequest) error {
	if n := len(req.GetDescriptors()); n > MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "the request has %d descriptors; at most %d in one request", n, MaxDescriptors)
	}
	return nil
}

// checkFanOut refuses, before any store call, a request whose checks,
// negative hits and shadow limits are more than MaxSeparateCalls, or whose
// enforced limits are more than one TakeAll holds.
func checkFanOut(groups []*group) error {
	separate, enforced := 0, 0
	for _, g := range groups {
		if g.check || g.refund || g.rule.shadow {
			separate++
		} else {
			enforced++
		}
	}
	if separate > MaxSeparateCalls {
		return status.Errorf(codes.InvalidArgument, "the request has %d checks (hits_addend 0), negative hits and shadow limits; at most %d in one request", separate, MaxSeparateCalls)
	}
	if enforced > backend.MaxRequests {
		return status.Errorf(codes.InvalidArgument, "the request has %d limits to check; at most %d in one request", enforced, backend.MaxRequests)
	}
	return nil
}

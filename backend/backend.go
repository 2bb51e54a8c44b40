// Package backend defines Store, the one seam between the limiter and the
// places where limiter state lives (process memory, Redis), and the types that
// cross it.
//
// A Store executes an algorithm's step for a key atomically. It does not read
// the clock: every Request carries the time to decide at. A denied request is
// a normal Result with Allowed false; a Store returns an error only when it
// could not decide (bad input, or the backend failed). That distinction is
// what lets a fallback store trip a circuit breaker on errors and never on
// denials.
//
// Implementations: backend/memorystore in process, and the Redis stores.
// backend/storetest holds the conformance suite every Store must pass.
package backend

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// Store keeps limiter state and decides requests against it. Implementations
// must be safe for concurrent use, and Take must be atomic per key: under any
// concurrency, no window may admit more than the rule's limit.
type Store interface {
	// Take decides req and, if admitted, consumes req.Cost units.
	Take(ctx context.Context, req Request) (Result, error)
	// Peek reports what Take would decide for req without consuming
	// anything. Its Remaining is the allowance before the request.
	Peek(ctx context.Context, req Request) (Result, error)
	// Reset forgets everything recorded for key under rule's algorithm.
	Reset(ctx context.Context, key Key, rule algorithms.Rule) error
}

// Key names one limited subject: ID (a user, an IP address, an API token)
// within Prefix (usually one limit of one service). Stores keep different
// keys apart for any bytes in ID.
type Key struct {
	// Prefix namespaces the key, e.g. "api:login:". May be empty. It must
	// not contain '{' or '}': Redis stores put the ID in a hash tag, and a
	// brace in the prefix would move every key of the prefix into one
	// Redis Cluster slot.
	Prefix string
	// ID identifies the subject. It must not be empty.
	ID string
}

// Request is one decision to make.
type Request struct {
	// Key is the subject being limited.
	Key Key
	// Rule is the limit to apply.
	Rule algorithms.Rule
	// Now is the time to decide at; stores use it instead of reading a
	// clock. It is truncated to the millisecond.
	Now time.Time
	// Cost is the number of units the request takes, 1..Rule.Limit.
	Cost int64
}

// Validate reports whether the request can be decided. Errors wrap
// algorithms.ErrInvalidRule or algorithms.ErrInvalidRequest.
func (r *Request) Validate() error {
	if err := r.Rule.Validate(); err != nil {
		return err
	}
	if err := r.Key.Validate(); err != nil {
		return err
	}
	if r.Now.UnixMilli() < 0 {
		return fmt.Errorf("%w: time %v is before the Unix epoch", algorithms.ErrInvalidRequest, r.Now)
	}
	return r.Rule.ValidateCost(r.Cost)
}

// Validate reports whether the key can be used. The error wraps
// algorithms.ErrInvalidRequest.
func (k Key) Validate() error {
	if k.ID == "" {
		return fmt.Errorf("%w: key is empty", algorithms.ErrInvalidRequest)
	}
	for i := 0; i < len(k.Prefix); i++ {
		if c := k.Prefix[i]; c == '{' || c == '}' {
			return fmt.Errorf("%w: prefix %q contains '{' or '}'; remove them (the id goes in a Redis hash tag)",
				algorithms.ErrInvalidRequest, k.Prefix)
		}
	}
	return nil
}

// Millis returns r.Now in whole milliseconds since the Unix epoch, the time
// unit of every algorithm engine.
func (r *Request) Millis() int64 { return r.Now.UnixMilli() }

// Result is a Store's decision. Its fields map onto the RateLimit HTTP
// headers: Limit, Remaining, RetryAfter and ResetAfter.
type Result struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Limit is the limit the request was decided against.
	Limit int64
	// Remaining is the allowance left (after this request, if admitted).
	Remaining int64
	// RetryAfter is how long until the same request would be admitted if
	// nothing else were; 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full allowance.
	ResetAfter time.Duration
	// Degraded reports that the decision was not made by the primary store
	// (it was unavailable) but by a fallback policy.
	Degraded bool
}

// ResultOf converts an algorithm outcome for rule into a Result.
func ResultOf(rule algorithms.Rule, o algorithms.Outcome) Result {
	return Result{
		Allowed:    o.Allowed,
		Limit:      rule.Limit,
		Remaining:  o.Remaining,
		RetryAfter: millis(o.RetryAfter),
		ResetAfter: millis(o.ResetAfter),
	}
}

// maxMillis is the longest duration, in milliseconds, a time.Duration holds.
const maxMillis = int64(math.MaxInt64 / time.Millisecond)

// millis converts milliseconds to a Duration, saturating instead of wrapping
// (state and request centuries apart).
func millis(ms int64) time.Duration {
	return time.Duration(min(ms, maxMillis)) * time.Millisecond
}

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
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/boundid"
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
	// now is the reset's time: a store whose keys are named by time (the
	// Redis stores keep a fixed window's count in a key per window)
	// deletes those of the windows before, at and after it; the others
	// ignore it. Like Request.Now, it is the caller's clock, never read
	// by the store.
	Reset(ctx context.Context, key Key, rule algorithms.Rule, now time.Time) error
	// TakeAll decides several requests all or nothing: they are admitted
	// only when every one of them is, and then each consumes its cost; a
	// denial consumes nothing from any of them. The Result describes the
	// deciding request and says which (Result.Rule); a store that is an
	// EachTaker also gives every request's own (TakeEach). Requests must pass
	// ValidateAll. Stores that cannot check every key at once (Redis
	// Cluster keys in different slots) say in their docs what they
	// guarantee instead.
	TakeAll(ctx context.Context, reqs []Request) (Result, error)
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
	// OnFailure is how a fallback store (package fallback) decides the
	// request while its primary store is unavailable. The zero value
	// leaves it to the fallback store's own policy; other stores ignore it.
	OnFailure FailurePolicy
	// Shadow marks a request for a limit in shadow mode: the store decides
	// and counts it as usual, and the caller will not enforce a denial.
	// Stores ignore it; wrappers that report decisions (package
	// backend/observe) tell shadow denials apart by it.
	Shadow bool
	// Exact, when its Base is set, names the Redis keys of a FixedWindow
	// rule exactly (see ExactKey); other stores ignore it.
	Exact ExactKey
	// Charge records Cost as a cost already incurred (tokens known after
	// the response) instead of asking for it: a charge is never refused
	// for want of allowance. Units beyond what is left are recorded as
	// debt that later requests wait out (a fixed window until it ends, the
	// logs as the charged units slide out, the sliding counter weighted as
	// usual, gcra as its debt drains). Cost may exceed Rule.Limit, up to
	// Rule.ChargeBound (algorithms.MaxCharge, 2^40; less for gcra). Its Result has Allowed true (it was recorded), Remaining
	// never below 0 (0 in debt), RetryAfter 0, and ResetAfter when the key,
	// debt included, is free again. In a TakeAll a charge never makes the
	// others refused, and is recorded even when they are. A Peek of a
	// charge reports what it would leave without recording it. Rules that
	// hold leases (concurrency) refuse it (algorithms.Rule.CheckCharge says
	// why).
	Charge bool
}

// Validate reports whether the request can be decided. Errors wrap
// algorithms.ErrInvalidRule or algorithms.ErrInvalidRequest. A resolved
// rule (algorithms.Rule.Resolve: a limiter's) is not validated again.
func (r *Request) Validate() error {
	if !r.Rule.Resolved() {
		if err := r.Rule.Validate(); err != nil {
			return err
		}
	}
	if err := r.Key.Validate(); err != nil {
		return err
	}
	if ms := r.Now.UnixMilli(); ms < 0 || ms > algorithms.MaxLeaseMillis {
		if err := r.validateTime(ms); err != nil {
			return err
		}
	}
	if r.Exact.Base != "" {
		if err := r.Exact.Check(r.Rule); err != nil {
			return err
		}
	}
	if r.Charge {
		return r.validateCharge()
	}
	if r.Cost >= 1 && r.Cost <= r.Rule.Limit {
		return nil // what ValidateCost checks, without its call
	}
	return r.Rule.ValidateCost(r.Cost)
}

// validateTime checks a time (ms since the epoch) outside the years every
// rule can decide at.
func (r *Request) validateTime(ms int64) error {
	if ms < 0 {
		return fmt.Errorf("%w: time %v is before the Unix epoch", algorithms.ErrInvalidRequest, r.Now)
	}
	if ms > algorithms.MaxLeaseMillis && r.Rule.HoldsLeases() {
		return fmt.Errorf("%w: time %v is after %v, the last a %s rule can decide at (its lease ids count 1/1000 ms below 2^53); check the clock",
			algorithms.ErrInvalidRequest, r.Now.UTC(), time.UnixMilli(algorithms.MaxLeaseMillis).UTC(), r.Rule.Algorithm)
	}
	return nil
}

// validateCharge checks a charge's cost and that its rule can record one.
func (r *Request) validateCharge() error {
	if err := r.Rule.CheckCharge(); err != nil {
		return err
	}
	if bound := r.Rule.ChargeBound(); r.Cost <= 0 || r.Cost > bound {
		return fmt.Errorf("%w: charge of %d under %s; a charge is 1 to %d units", algorithms.ErrInvalidRequest, r.Cost, r.Rule.Algorithm, bound)
	}
	return nil
}

// Validate reports whether the key can be used. The error wraps
// algorithms.ErrInvalidRequest.
func (k Key) Validate() error {
	if k.ID == "" {
		return fmt.Errorf("%w: key is empty", algorithms.ErrInvalidRequest)
	}
	// Two vectorised scans: a byte loop cost more than the decision's step.
	if strings.IndexByte(k.Prefix, '{') >= 0 || strings.IndexByte(k.Prefix, '}') >= 0 {
		return fmt.Errorf("%w: prefix %s contains '{' or '}'; remove them (the id goes in a Redis hash tag)",
			algorithms.ErrInvalidRequest, boundid.Quote(k.Prefix))
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
	// Unconfirmed reports an admission that fewer replicas acknowledged
	// than the store was told to wait for (see the Redis stores'
	// WithReplicaAck): a failover now could lose it.
	Unconfirmed bool
	// Cached reports a denial answered by a deny cache (package
	// backend/denycache) from an earlier denial of the same key, without
	// a store call. It is the Result the store would have given.
	Cached bool
	// ShadowDenied reports that a limit in shadow mode (limiter.Config.Mode)
	// would have denied the request: it was decided and counted as if
	// enforced, and admitted anyway (Allowed says what the enforced limits
	// decided). Set by the limiter, never by a store.
	ShadowDenied bool
	// Exempt reports an admission of a key on the limit's exemptions
	// (limiter.Config.Exempt), made without a store call: nothing was
	// counted, and Remaining is the full Limit. Set by the limiter.
	Exempt bool
	// DenyListed reports a denial of a key on the limit's deny list
	// (limiter.Config.Deny), made without a store call. It has no
	// RetryAfter: retrying will not help. Set by the limiter.
	DenyListed bool
	// Rule is, for a decision over several requests (Store.TakeAll), the
	// index of the request the other fields describe: when denied, the
	// denying request that must wait longest; when admitted, the one with
	// the least allowance left. It is 0 for a single request.
	Rule int
	// Lease is, for an admitted request of a rule that holds leases
	// (algorithms.Concurrency; also a TakeAll holding one, or a Renew), the
	// id of the lease it holds: name it in LeaseStore.Release and Renew. 0
	// otherwise. Negative ids are local leases granted by package
	// fallback.
	Lease int64
}

// LeaseStore is a Store that holds concurrency leases
// (algorithms.Concurrency). Every store of this module implements it;
// wrappers forward it.
type LeaseStore interface {
	Store
	// Release gives back a lease: req as the Take that granted it (Key,
	// Rule, Cost) with Now the time of release. held reports whether it
	// was still held; a lease that expired, was released or was never
	// granted is not, and nothing changes. req's rule must hold leases.
	Release(ctx context.Context, req Request, lease int64) (held bool, err error)
	// Renew extends a held lease by the rule's window from req.Now,
	// atomically: Allowed, and the new id in Result.Lease, when it was
	// held; Allowed false (and nothing changed) when it was not.
	Renew(ctx context.Context, req Request, lease int64) (Result, error)
}

// ValidateLease reports whether req can release or renew a lease: a valid
// request of a rule that holds leases. The error wraps
// algorithms.ErrInvalidRule or algorithms.ErrInvalidRequest.
func ValidateLease(req *Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if !req.Rule.HoldsLeases() {
		return fmt.Errorf("%w: algorithm %s holds no leases; release and renew only %s leases",
			algorithms.ErrInvalidRequest, req.Rule.Algorithm, algorithms.Concurrency)
	}
	return nil
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

// MaxRequests is the most requests one TakeAll call decides.
const MaxRequests = 16

// inRequest names request i in err, one of Request.Validate's errors,
// after its sentinel, so that every error of this package starts with
// one: "limitkit: invalid request: request 2: key is empty".
func inRequest(i int, err error) error {
	for _, s := range []error{algorithms.ErrInvalidRule, algorithms.ErrInvalidRequest} {
		if detail, ok := strings.CutPrefix(err.Error(), s.Error()+": "); ok {
			return fmt.Errorf("%w: request %d: %s", s, i, detail)
		}
	}
	return fmt.Errorf("%w: request %d: %w", algorithms.ErrInvalidRequest, i, err)
}

// ValidateAll reports whether reqs can be decided together by TakeAll: 1 to
// MaxRequests valid requests, all at the same time, and no two on the same
// state (same key and algorithm), and at most one of a rule that holds
// leases (one lease per decision). Errors wrap algorithms.ErrInvalidRule
// or algorithms.ErrInvalidRequest.
func ValidateAll(reqs []Request) error {
	if len(reqs) == 0 || len(reqs) > MaxRequests {
		return fmt.Errorf("%w: %d requests in one call; give 1 to %d", algorithms.ErrInvalidRequest, len(reqs), MaxRequests)
	}
	now := reqs[0].Millis()
	lease := -1
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return inRequest(i, err)
		}
		if r.Rule.HoldsLeases() {
			if lease >= 0 {
				return fmt.Errorf("%w: requests %d and %d are both %s leases; one decision holds at most one lease: acquire the other in a call of its own",
					algorithms.ErrInvalidRequest, lease, i, r.Rule.Algorithm)
			}
			lease = i
		}
		if r.Millis() != now {
			return fmt.Errorf("%w: request %d is at %v, request 0 at %v; requests decided together share one time",
				algorithms.ErrInvalidRequest, i, r.Now, reqs[0].Now)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Rule.Algorithm == r.Rule.Algorithm {
				return fmt.Errorf("%w: requests %d and %d both count key %s (prefix %s) with %s; give each rule its own prefix",
					algorithms.ErrInvalidRequest, j, i, boundid.Quote(r.Key.ID), boundid.Quote(r.Key.Prefix), r.Rule.Algorithm)
			}
		}
	}
	return nil
}

// Combine folds the results of requests decided together into one: allowed
// only when all are, described by the result Result.Rule names (see there),
// degraded or unconfirmed when any is, with the Lease of the one that holds
// a lease when admitted (0 when denied).
func Combine(results []Result) Result {
	if len(results) == 0 {
		return Result{}
	}
	pick, allowed := 0, true
	degraded, unconfirmed := false, false
	var lease int64
	for _, r := range results {
		allowed = allowed && r.Allowed
		degraded = degraded || r.Degraded
		unconfirmed = unconfirmed || r.Unconfirmed
		if r.Lease != 0 {
			lease = r.Lease
		}
	}
	for i, r := range results {
		p := results[pick]
		switch {
		case !allowed && !r.Allowed && (p.Allowed || r.RetryAfter > p.RetryAfter):
			pick = i
		case allowed && r.Remaining < p.Remaining:
			pick = i
		}
	}
	out := results[pick]
	out.Allowed, out.Degraded, out.Unconfirmed, out.Rule = allowed, degraded, unconfirmed, pick
	out.Lease = 0
	if allowed {
		out.RetryAfter = 0
		out.Lease = lease
	}
	return out
}

// EachTaker is a Store whose TakeAll can also hand back every request's
// own result, from the same atomic call. Every store and wrapper of this
// module is one; call it through TakeEach, which answers for the stores
// that are not.
//
// The results come back as a value rather than in Result so that a
// Result stays a small value with no pointers, cheap to copy for the
// single decisions that are most of them.
type EachTaker interface {
	Store
	// TakeEach is TakeAll, which returns res, also returning each: one
	// result per request, in request order, none with a Rule of its own.
	// When admitted, what each took (Remaining after it); when denied,
	// what each holds unconsumed (Allowed says whether that request alone
	// would have passed; Remaining and the times are a Peek's of its
	// cost). each is nil when the store could not tell (one request,
	// which res describes; admissions rolled back): a caller that needs
	// the others then peeks them.
	TakeEach(ctx context.Context, reqs []Request) (res Result, each []Result, err error)
}

// TakeEach decides reqs with s.TakeEach when s is an EachTaker, else with
// s.TakeAll and no each. It looks at s alone, never under it (As): a
// wrapper that is no EachTaker answers TakeAll itself, and what it
// answers may not be what the store under it decided.
func TakeEach(ctx context.Context, s Store, reqs []Request) (Result, []Result, error) {
	if e, ok := s.(EachTaker); ok {
		return e.TakeEach(ctx, reqs)
	}
	res, err := s.TakeAll(ctx, reqs)
	return res, nil, err
}

// CombineEach is Combine for a store's TakeEach: results, when there are
// more than one, are also its each.
func CombineEach(results []Result) (Result, []Result) {
	if len(results) < 2 {
		return Combine(results), nil
	}
	return Combine(results), results
}

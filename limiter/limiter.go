// Package limiter is the API services call to rate-limit.
//
// A Limiter enforces one limit, such as 100 requests per minute per user, on
// a backend.Store that keeps the counts: backend/memorystore in process, or
// a Redis store shared by every instance of a service. The Config chooses the
// algorithm by name:
//
//   - "sliding_log" (the default): exact; memory per key grows with the
//     limit (at most algorithms.MaxSlidingLogLimit).
//   - "sliding_counter": two weighted fixed windows; constant memory,
//     approximate (never under-counts).
//   - "fixed_window": one counter per window; cheapest, but admits up to
//     twice the limit across a window boundary.
//   - "compact_log": the decisions of "sliding_log", stored on Redis in one
//     string of 7-byte timestamps (840 B for a full key at limit 100).
//   - "two_level": a counter until a key uses half its limit in a window,
//     then an exact log; never over the limit.
//   - "gcra": a token bucket: Limit per Window as a rate, bursts of up to
//     Limit.
//   - "concurrency": at most Limit units held at once, each for at most
//     Window unless renewed: taken with Acquire, given back with
//     Lease.Release (see Lease).
//
// algorithms.Names lists them; the README compares them.
//
// Typical use:
//
//	store, _ := memorystore.New()
//	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "api:"})
//	if err != nil { ... } // the error says what to fix in the config
//	d, err := lim.Allow(ctx, userID)
//	if err != nil { ... } // the store failed (or the key was empty)
//	if !d.Allowed { ... } // reject; d.RetryAfter says when to come back
//
// AllowN takes several units at once, all or nothing. Peek reports without
// consuming. Reset forgets a key. Wait blocks until a request is admitted.
// A "concurrency" limit bounds how many requests are in flight instead:
// Acquire returns a Lease to release when the work is done.
//
// Limits live: SetConfig changes a limiter's limit, window or guard while
// it serves, keeping what was counted (a Group changes several at once);
// Plans picks per request which named limit applies; a limit in Shadow
// mode counts but never denies, and says when it would have. Config.Exempt
// and Config.Deny list keys and address prefixes decided without a store
// call: never limited, or always denied.
//
// A denial is a Decision with Allowed false, never an error. Errors mean the
// request could not be decided: bad input (errors.Is ErrInvalidRequest) or a
// failing store.
//
// The limiter reads its clock once per call and passes the time to the store,
// so a fake clock (WithClock) drives every decision in tests. A Limiter is
// safe for concurrent use; its zero value is not usable, use New.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/boundid"
	"github.com/limitkit/limitkit/internal/hotpath"
	"github.com/limitkit/limitkit/internal/option"
)

// Errors reported for bad input; test with errors.Is.
var (
	// ErrInvalidConfig reports a Config that New cannot use.
	ErrInvalidConfig = algorithms.ErrInvalidRule
	// ErrInvalidRequest reports a call that cannot be decided: an empty
	// key or a cost outside 1..Limit.
	ErrInvalidRequest = algorithms.ErrInvalidRequest
)

// errNilStore refuses a constructor given no store.
var errNilStore = invalidf(ErrInvalidConfig, "store is nil; pass a backend.Store such as memorystore.New()")

// Option configures New, NewComposite and NewGroup. Options apply in
// order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults of newOptions.
type options struct {
	clock clock.Clock
}

// WithClock makes the limiter read time from c instead of the system clock.
// When c is a clock.Timer (clock.Fake is), Wait also waits on it. A nil c
// is refused.
func WithClock(c clock.Clock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("WithClock: the clock is nil; pass a clock.Clock (clock.System, a clock.Fake), or leave the option out")
		}
		o.clock = c
		return nil
	}
}

// newOptions applies opts over the defaults.
func newOptions(opts []Option) (options, error) {
	o := options{clock: clock.System}
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("limiter: %w", err)
	}
	return o, nil
}

// Decision is the outcome of a call: whether the request was admitted, the
// limit, the remaining allowance, when to retry and when the key is free
// again, whether a fallback made it, and, for a limiter with a guard or a
// Composite, which rule it describes (Rule: GuardRule for the guard).
type Decision = backend.Result

// Limiter enforces one Config on a Store. SetConfig changes it while it
// serves.
type Limiter struct {
	store backend.Store
	clock clock.Clock
	// src holds the configuration: the limiter's own, or shared by the
	// limiters of a Group so that they change together; idx is this
	// limiter's place in it.
	src *source
	idx int
	// hot is the store's direct Take, nil when it has none.
	hot hotpath.Take
}

// New returns a limiter for cfg on store, or an error that says what to
// change: one wrapping ErrInvalidConfig for cfg, or naming the option
// refused.
func New(store backend.Store, cfg Config, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errNilStore
	}
	c, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Limiter{store: store, clock: o.clock, src: newSource([]*compiled{c}), hot: hotpath.Of(store)}, nil
}

// Config returns the limiter's configuration, defaults filled in: the one
// in force now (see SetConfig).
func (l *Limiter) Config() Config {
	c := l.current().config
	if c.Guard != nil {
		g := *c.Guard
		c.Guard = &g
	}
	c.Exempt, c.Deny = slices.Clone(c.Exempt), slices.Clone(c.Deny)
	return c
}

func (l *Limiter) current() *compiled { return (*l.src.cur.Load())[l.idx] }

// takeSimple decides c's one rule (c.simple) for keys, which passed
// checkRequest: on a store in this process without a backend.Request
// (package internal/hotpath) when it has such a path, else by Take.
func (l *Limiter) takeSimple(ctx context.Context, c *compiled, keys []string, n int64) (Decision, error) {
	p := &c.all[0]
	if l.hot != nil && c.hot {
		// A time before the epoch goes to Take, for its error.
		if now := clock.UnixMilli(l.clock); now >= 0 {
			return l.hot(p.prefix, keys[p.key], &p.rule, now, n), nil
		}
	}
	return l.store.Take(ctx, p.request(keys, n, l.clock.Now()))
}

// Generation counts the configurations the limiter has had: 1 after New,
// one more after each change by SetConfig or Group.SetConfigs. Reading it
// is one atomic load, for callers that cache what they derive from Config
// (package httplimit's header values).
func (l *Limiter) Generation() uint64 { return l.current().gen }

// SetConfig changes the limiter's configuration while it serves requests:
// cfg is validated first (an invalid one is refused with the error New
// would give, and nothing changes), then swapped in atomically: each
// request is decided wholly by the old configuration or wholly by the new
// one. The store, and what it counted, is kept; what a change does to the
// counts, by algorithm:
//
//   - limit: the logs and counters keep the units they counted and
//     measure them against the new limit (lowered below the count, the key
//     is denied until enough slides out; raised, the difference is
//     available at once: 3 of 4 become 3 of 8). GCRA keeps the time until
//     its bucket is full, in whole milliseconds rounded up, that is the
//     share of the bucket in use: 3 of 4 become 6 of 8.
//   - window: the logs (sliding_log, compact_log, a heavy two_level key)
//     keep their timestamps and read them under the new window; a longer
//     window finds only the timestamps the old one still kept (those
//     within two old windows). fixed_window and sliding_counter keep the
//     current window's start and count: the window in progress ends at
//     start + the new window, and the next ones are aligned to the new
//     length. GCRA caps its debt at a full bucket of the new window.
//   - algorithm or prefix: the state lives under another key (each
//     algorithm has its own key suffix), so counts start from zero; the
//     old keys expire on their own.
//   - guard: changed like the main limit; added, it starts from zero.
//   - mode: counts are the same in both modes, so a change keeps them.
//
// For a limiter built by a Group, SetConfig changes this one limiter (see
// Group.SetConfigs to change several at once).
func (l *Limiter) SetConfig(cfg Config) error {
	c, err := compile(cfg)
	if err != nil {
		return err
	}
	s := l.src
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := slices.Clone(*s.cur.Load())
	c.gen = cs[l.idx].gen + 1
	cs[l.idx] = c
	s.cur.Store(&cs)
	return nil
}

// Allow decides one request for key and, if admitted, counts it. On a
// concurrency limit it returns an error wrapping ErrInvalidRequest: use
// Acquire.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	c := l.current()
	if c.lease >= 0 {
		return Decision{}, errUseAcquire
	}
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			return d, nil
		}
	}
	// The entrance check (see checkRequest): a cost of 1 fits every rule.
	if key == "" {
		return Decision{}, errEmptyKey
	}
	keys := [1]string{key}
	if c.simple {
		// One rule: call the store from here, as each call level
		// copies the Decision once more.
		return l.takeSimple(ctx, c, keys[:], 1)
	}
	return c.decide(ctx, l.store, keys[:], 1, l.clock.Now())
}

// AllowN decides a request of n units for key: all n are admitted and
// counted, or none. n must be between 1 and the limit.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	c := l.current()
	if c.lease >= 0 {
		return Decision{}, errUseAcquire
	}
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			return d, nil
		}
	}
	keys := [1]string{key}
	if err := c.checkRequest(keys[:], n); err != nil {
		return Decision{}, err
	}
	if c.simple {
		return l.takeSimple(ctx, c, keys[:], n)
	}
	return c.decide(ctx, l.store, keys[:], n, l.clock.Now())
}

// Peek reports what Allow would decide for key now, without counting
// anything. Its Remaining is the allowance before the request.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	c := l.current()
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			return d, nil
		}
	}
	keys := [1]string{key}
	if err := c.checkRequest(keys[:], 1); err != nil {
		return Decision{}, err
	}
	return c.peek(ctx, l.store, keys[:], l.clock.Now())
}

// Reset forgets what was counted for key, giving it its full allowance.
// With a guard, the guard's count is forgotten too.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	c := l.current()
	keys := [1]string{key}
	if err := c.checkRequest(keys[:], 1); err != nil {
		return err
	}
	// The stores that name keys by time (Redis' fixed windows) delete
	// those around the limiter's time.
	return c.reset(ctx, l.store, keys[:], l.clock.Now())
}

// Wait blocks until one request for key is admitted, and returns that
// decision. See WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// minWait bounds how often WaitN retries a denial that gives no retry time
// (a fallback failing closed).
const minWait = 10 * time.Millisecond

// WaitN blocks until a request of n units for key is admitted, sleeping for
// each denial's RetryAfter, and returns the admitting decision. It returns
// an error when ctx ends first, or at once, wrapping
// context.DeadlineExceeded, when the next retry would come after ctx's
// deadline. Other callers can take the allowance while it sleeps; WaitN
// does not reserve it.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed {
			return d, err
		}
		if d.DenyListed {
			return d, denyListedError(key)
		}
		wait := max(d.RetryAfter, minWait)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return d, fmt.Errorf("limiter: waiting %v for %s would pass the context deadline: %w", wait, boundid.Quote(key), context.DeadlineExceeded)
		}
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("limiter: wait for %s: %w", boundid.Quote(key), ctx.Err())
		case <-clock.After(l.clock, wait):
		}
	}
}

// Acquire takes a lease of one unit on key from a concurrency limit (see
// AcquireN).
func (l *Limiter) Acquire(ctx context.Context, key string) (*Lease, Decision, error) {
	return l.AcquireN(ctx, key, 1)
}

// AcquireN takes a lease of n units on key from a concurrency limit: it is
// admitted when the units held on key plus n are at most the limit. When
// admitted it returns the Lease, which the caller must release; when
// denied, a nil Lease and the Decision (Allowed false, RetryAfter until
// enough held leases expire if none is released). On a limit that is not a
// concurrency limit it returns an error wrapping ErrInvalidRequest.
//
// A key on Config.Exempt gets a Lease that holds nothing (Decision.Exempt);
// one on Config.Deny is denied. A limit in Shadow mode grants a Lease
// always: a real one when the limit admits, one that holds nothing when it
// would have denied (Decision.ShadowDenied). With a Guard (a rate limit),
// the lease and the guard's unit are taken together, all or nothing.
func (l *Limiter) AcquireN(ctx context.Context, key string, n int64) (*Lease, Decision, error) {
	c := l.current()
	if c.lease < 0 {
		return nil, Decision{}, noConcurrency(c)
	}
	now := l.clock.Now()
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			if !d.Allowed {
				return nil, d, nil
			}
			if err := c.all[c.lease].rule.ValidateCost(n); err != nil {
				return nil, Decision{}, restate(ErrInvalidRequest, err)
			}
			return newLease(l, l.store, l.clock, key, n, c.all[c.lease], 0, now), d, nil
		}
	}
	keys := [1]string{key}
	return acquire(ctx, l, l.store, l.clock, c, keys[:], n, now)
}

// Release gives back the lease whose Lease.ID is leaseID, granted on key by
// this limiter or another sharing its store and prefix (another process).
// It returns nil, ErrLeaseNotHeld (expired, or already released), an error
// wrapping ErrLeaseKey when the id was granted on another key, or one
// wrapping ErrInvalidRequest for an id that is not a Lease.ID.
func (l *Limiter) Release(ctx context.Context, key, leaseID string) error {
	return releaseByID(ctx, l.store, l.clock.Now(), l.current(), key, leaseID)
}

// Request is one request of one unit as a transport (limiter/httplimit,
// limiter/grpclimit) hands it to Admit.
type Request struct {
	// Keys are the request's keys: one for a Limiter or Plans, one per
	// limit for a Composite.
	Keys []string
	// Client is the client's address when the first key was derived from
	// it (the transport's key func says so); only then do the address
	// entries of Config.Exempt and Config.Deny apply, and to Client, not
	// to the key. The zero Addr: only the exact key entries apply, so a
	// key a client writes itself (a header holding "10.9.9.9") never
	// matches an address entry.
	Client netip.Addr
}

// Admit decides req as one unit: under a concurrency limit it takes a
// lease (as Acquire), under any other it takes a unit (as Allow). Both the
// choice and the decision are made from one configuration, so a SetConfig
// to or from "concurrency" never fails a request in flight. The Lease is
// nil unless one was granted; release it as Acquire's.
func (l *Limiter) Admit(ctx context.Context, req Request) (*Lease, Decision, error) {
	if len(req.Keys) != 1 {
		return nil, Decision{}, invalidf(ErrInvalidRequest, "%d keys for one limit; give one", len(req.Keys))
	}
	c := l.current()
	key := req.Keys[0]
	if c.lists != nil {
		if d, ok := c.listedClient(key, req.Client); ok {
			if c.lease < 0 || !d.Allowed {
				return nil, d, nil
			}
			return newLease(l, l.store, l.clock, key, 1, c.all[c.lease], 0, l.clock.Now()), d, nil
		}
	}
	if c.lease >= 0 {
		return acquire(ctx, l, l.store, l.clock, c, req.Keys, 1, l.clock.Now())
	}
	// The entrance check (see checkRequest): a cost of 1 fits every rule.
	if key == "" {
		return nil, Decision{}, errEmptyKey
	}
	if c.simple {
		d, err := l.takeSimple(ctx, c, req.Keys, 1)
		return nil, d, err
	}
	d, err := c.decide(ctx, l.store, req.Keys, 1, l.clock.Now())
	return nil, d, err
}

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
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/boundid"
)

// Errors reported for bad input; test with errors.Is.
var (
	// ErrInvalidConfig reports a Config that New cannot use.
	ErrInvalidConfig = algorithms.ErrInvalidRule
	// ErrInvalidRequest reports a call that cannot be decided: an empty
	// key or a cost outside 1..Limit.
	ErrInvalidRequest = algorithms.ErrInvalidRequest
)

// DefaultPrefix is the key prefix of a Config that sets none.
const DefaultPrefix = "limitkit:"

// Config describes one limit. In JSON, windows are duration strings:
//
//	{"algorithm": "sliding_log", "limit": 100, "window": "1m", "prefix": "pay:",
//	 "on_failure": "fail_closed",
//	 "guard": {"limit": 1000, "window": "24h", "on_failure": "fail_closed"}}
type Config struct {
	// Algorithm is "sliding_log" (default), "compact_log", "two_level",
	// "sliding_counter", "gcra", "fixed_window" or "concurrency" (see the
	// package doc). A concurrency limit is used through Acquire, not
	// Allow.
	Algorithm algorithms.Name
	// Limit is the number of units admitted per Window (for
	// "concurrency": held at once). Required, 1 to 2^53 (10,000 for
	// sliding_log and concurrency).
	Limit int64
	// Window is the period of the limit (for "concurrency": the lease
	// timeout, after which a lease not released or renewed frees its
	// slots). Required, a whole number of milliseconds up to 366 days.
	Window time.Duration
	// Prefix namespaces this limit's keys in the store; give each limit
	// sharing a store its own. Default DefaultPrefix. It must not contain
	// '{' or '}'.
	Prefix string
	// OnFailure is how requests are decided while a fallback store's
	// primary (Redis) is unavailable: "local", "local:N", "fail_open" or
	// "fail_closed" (see package fallback). Default: the fallback store's
	// own policy. Stores other than fallback ignore it.
	OnFailure backend.FailurePolicy
	// Mode is Enforce (default) or Shadow: a shadow limit decides and
	// counts every request as if enforced but never denies one; the
	// Decision says when it would have (ShadowDenied). The guard has its
	// own Mode.
	Mode Mode
	// Guard, when set, is a second, independent limit on the same keys,
	// such as 1,000 a day on top of 100 a minute. A request is admitted
	// only when both admit; a denial by either consumes nothing from the
	// other. Default: none.
	Guard *Guard
	// Exempt lists keys that are never limited: Allow admits them with
	// Decision.Exempt set and no store call. Each entry is an exact key
	// or an address ("192.0.2.7") or CIDR prefix ("10.0.0.0/8",
	// "2001:db8::/32"), read strictly: no white space around it, no IPv6
	// zone, no host bits set. Address entries match client addresses
	// only: the key itself for Allow (IPv4-mapped keys match IPv4 entries,
	// a network key "2001:db8:1:2::/64" an entry that holds all of it), and
	// for Admit only Request.Client, never a key a client wrote. Default:
	// none.
	Exempt []string
	// Deny lists keys that are always denied, without a store call:
	// Decision.DenyListed is set and RetryAfter is 0, and Wait returns
	// ErrDenyListed at once. A deny entry wins over an exemption. In
	// Shadow mode a deny-listed key is admitted with ShadowDenied set.
	// Entries are written as Exempt's. Default: none.
	Deny []string
}

// Guard is a limiter's secondary limit, kept apart from the main one (its
// keys are the limiter's prefix + "guard:" with the same ids). On financial
// endpoints it bounds what a Redis failover that lost the main limit's
// latest writes can let through.
//
// By default the guard lives in the limiter's store, and on Redis in the
// same hash slot as its main key, decided by one script: losing that
// node's data loses both. Store puts the guard on a store of its own (a
// second Redis) that survives the loss of the main store's data.
type Guard struct {
	// Algorithm is "fixed_window" (default), "sliding_counter" or
	// "sliding_log".
	Algorithm algorithms.Name
	// Limit is the number of units admitted per Window. Required.
	Limit int64
	// Window is the period of the limit. Required.
	Window time.Duration
	// OnFailure is the guard's own failure policy (see
	// Config.OnFailure); a payment guard can fail closed while the main
	// limit goes local. Default: the fallback store's own policy.
	OnFailure backend.FailurePolicy
	// Mode is the guard's own Enforce (default) or Shadow mode.
	Mode Mode
	// Store, when set, keeps the guard's counts there instead of in the
	// limiter's store, such as a second Redis. A request then costs three
	// calls instead of one: the guard is peeked, the main limit taken, and
	// then the guard taken. A denial by either still consumes nothing
	// from the other, except when the guard denies between its peek and
	// its take (another caller took its last units): the main limit keeps
	// that unit until its window ends; never more than either limit is
	// admitted. Not written in JSON. Default nil: the limiter's store.
	Store backend.Store
}

// GuardRule is the Decision.Rule of a denial by a limiter's guard (0 is the
// main limit).
const GuardRule = 1

// guardPrefix follows the limiter's prefix in its guard's keys.
const guardPrefix = "guard:"

// ruleJSON is the part of Config and Guard written the same way in JSON.
// It serves MarshalJSON; reading goes through decodeConfig (decode.go).
type ruleJSON struct {
	Algorithm algorithms.Name       `json:"algorithm,omitempty"`
	Limit     int64                 `json:"limit"`
	Window    string                `json:"window"`
	OnFailure backend.FailurePolicy `json:"on_failure,omitzero"`
	Mode      Mode                  `json:"mode,omitempty"`
}

// configJSON is Config as written in JSON.
type configJSON struct {
	ruleJSON
	Prefix string     `json:"prefix,omitempty"`
	Guard  *guardJSON `json:"guard,omitempty"`
	Exempt []string   `json:"exempt,omitempty"`
	Deny   []string   `json:"deny,omitempty"`
}

type guardJSON struct{ ruleJSON }

func toRuleJSON(alg algorithms.Name, limit int64, window time.Duration, onFailure backend.FailurePolicy, mode Mode) ruleJSON {
	return ruleJSON{Algorithm: alg, Limit: limit, Window: window.String(), OnFailure: onFailure, Mode: mode}
}

// MarshalJSON writes a Config with windows as duration strings.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{ruleJSON: toRuleJSON(c.Algorithm, c.Limit, c.Window, c.OnFailure, c.Mode), Prefix: c.Prefix,
		Exempt: c.Exempt, Deny: c.Deny}
	if g := c.Guard; g != nil {
		j.Guard = &guardJSON{toRuleJSON(g.Algorithm, g.Limit, g.Window, g.OnFailure, g.Mode)}
	}
	return json.Marshal(j)
}

// withDefaults returns c with its empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Algorithm == "" {
		c.Algorithm = algorithms.SlidingLog
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Guard != nil {
		g := *c.Guard
		if g.Algorithm == "" {
			g.Algorithm = algorithms.FixedWindow
		}
		c.Guard = &g
	}
	return c
}

// Validate reports whether New would accept c, and if not, what to change.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.rule().Validate(); err != nil {
		return err
	}
	if err := c.Mode.validate("mode"); err != nil {
		return err
	}
	if err := (backend.Key{Prefix: c.Prefix, ID: "-"}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if g := c.Guard; g != nil {
		if err := (algorithms.Rule{Algorithm: g.Algorithm, Limit: g.Limit, Window: g.Window}).Validate(); err != nil {
			return fmt.Errorf("guard: %w", err)
		}
		if (algorithms.Rule{Algorithm: g.Algorithm}).HoldsLeases() {
			return fmt.Errorf("%w: guard algorithm %q: a guard is a rate limit; make the concurrency limit the main one (guarded by a rate limit), or use a Composite",
				ErrInvalidConfig, g.Algorithm)
		}
		if err := g.Mode.validate("guard.mode"); err != nil {
			return err
		}
	}
	if _, err := parseLists(c.Exempt, c.Deny); err != nil {
		return err
	}
	return nil
}

func (c Config) rule() algorithms.Rule {
	return algorithms.Rule{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window}
}

// parts returns the rules a limiter with c applies to each key: the main
// one, then the guard's. c has its defaults.
func (c Config) parts(key int) []part {
	ps := []part{{key: key, prefix: c.Prefix, rule: c.rule(), onFailure: c.OnFailure, shadow: c.Mode == Shadow}}
	if g := c.Guard; g != nil {
		ps = append(ps, part{key: key, prefix: c.Prefix + guardPrefix,
			rule: algorithms.Rule{Algorithm: g.Algorithm, Limit: g.Limit, Window: g.Window}, onFailure: g.OnFailure,
			shadow: g.Mode == Shadow, store: g.Store})
	}
	return ps
}

// part is one rule a limiter applies, to the key at index key of a call.
type part struct {
	key       int
	prefix    string
	rule      algorithms.Rule
	onFailure backend.FailurePolicy
	// shadow marks a rule in shadow mode; index is the rule's position
	// among all of the limiter's rules (Decision.Rule).
	shadow bool
	index  int
	// store is the part's own store (a guard's Guard.Store); nil for the
	// store of the call.
	store backend.Store
}

// storeOf returns the store p's state lives in.
func (p *part) storeOf(store backend.Store) backend.Store {
	if p.store != nil {
		return p.store
	}
	return store
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from c instead of the system clock.
// When c is a clock.Timer (clock.Fake is), Wait also waits on it.
func WithClock(c clock.Clock) Option {
	return func(l *Limiter) {
		if c != nil {
			l.clock = c
		}
	}
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
}

// New returns a limiter for cfg on store, or an error wrapping
// ErrInvalidConfig that says what to change.
func New(store backend.Store, cfg Config, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is nil; pass a backend.Store such as memorystore.New()", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, clock: clock.System, src: newSource([]*compiled{compile(cfg)})}
	for _, opt := range opts {
		opt(l)
	}
	return l, nil
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

// Allow decides one request for key and, if admitted, counts it. On a
// concurrency limit it returns an error wrapping ErrInvalidRequest: use
// Acquire.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	// Without a guard, call the store from here: each call level copies
	// the Decision (56 bytes) once more. A cost of 1 is always valid.
	c := l.current()
	if c.lease >= 0 {
		return Decision{}, errUseAcquire
	}
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			return d, nil
		}
	}
	if c.simple && key != "" {
		keys := [1]string{key}
		return l.store.Take(ctx, c.all[0].request(keys[:], 1, l.clock.Now()))
	}
	keys := [1]string{key}
	return decide(ctx, l.store, l.clock, c, keys[:], 1)
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
	return decide(ctx, l.store, l.clock, c, keys[:], n)
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
	return peekAll(ctx, l.store, l.clock, c, keys[:])
}

// Reset forgets what was counted for key, giving it its full allowance.
// With a guard, the guard's count is forgotten too.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	keys := [1]string{key}
	return reset(ctx, l.store, l.current().all, keys[:])
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

// allow decides a request of n units for keys against every part at now,
// through Take for one part and TakeAll for several. The Decision's Rule is
// the deciding part's index. Parts must have been checked.
func allow(ctx context.Context, store backend.Store, parts []part, keys []string, n int64, now time.Time) (Decision, error) {
	if len(parts) == 1 {
		// The request is built in the call, not returned by request:
		// copying it (120 bytes) is a good part of a memory store's cost.
		p := &parts[0]
		d, err := p.storeOf(store).Take(ctx, p.request(keys, n, now))
		d.Rule = p.index
		return d, err
	}
	var buf [backend.MaxRequests]backend.Request
	reqs := buf[:len(parts)]
	split := false
	for i := range parts {
		reqs[i] = parts[i].request(keys, n, now)
		split = split || parts[i].store != nil
	}
	var d Decision
	var err error
	if split {
		d, err = allowSplit(ctx, store, parts, reqs)
	} else {
		d, err = store.TakeAll(ctx, reqs)
	}
	if err == nil && d.Rule >= 0 && d.Rule < len(parts) {
		d.Rule = parts[d.Rule].index
	}
	return d, err
}

// allowSplit decides a main rule (reqs[0], on store) and a guard on a
// store of its own (reqs[1]), all or nothing without a script spanning
// both: peek the guard, take the main rule, take the guard. A main denial
// touches the guard not at all; the guard's counts outlive the main
// store's.
func allowSplit(ctx context.Context, store backend.Store, parts []part, reqs []backend.Request) (Decision, error) {
	guard := parts[1].storeOf(store)
	var results [2]Decision
	var err error
	if results[1], err = guard.Peek(ctx, reqs[1]); err != nil {
		return Decision{}, err
	}
	if !results[1].Allowed {
		// Report whichever rule makes the caller wait longest.
		if results[0], err = store.Peek(ctx, reqs[0]); err != nil {
			return Decision{}, err
		}
		return backend.Combine(results[:]), nil
	}
	if results[0], err = store.Take(ctx, reqs[0]); err != nil {
		return Decision{}, err
	}
	if !results[0].Allowed {
		return backend.Combine(results[:]), nil
	}
	results[1], err = guard.Take(ctx, reqs[1])
	if lease := results[0].Lease; lease != 0 {
		if err != nil || !results[1].Allowed {
			// A lease is given back at once, unlike a rate unit.
			giveBack(ctx, store, reqs[0], lease)
		}
	}
	if err != nil {
		return Decision{}, err
	}
	return backend.Combine(results[:]), nil // the lease, when admitted
}

// peek reports what allow would decide for one unit at now, without
// consuming. Parts must have been checked.
func peek(ctx context.Context, store backend.Store, parts []part, keys []string, now time.Time) (Decision, error) {
	var buf [backend.MaxRequests]Decision
	results := buf[:len(parts)]
	for i := range parts {
		var err error
		p := &parts[i]
		if results[i], err = p.storeOf(store).Peek(ctx, p.request(keys, 1, now)); err != nil {
			return Decision{}, err
		}
	}
	d := backend.Combine(results)
	d.Rule = parts[d.Rule].index
	return d, nil
}

// reset forgets what every part counted for keys.
func reset(ctx context.Context, store backend.Store, parts []part, keys []string) error {
	for i := range parts {
		p := &parts[i]
		if keys[p.key] == "" {
			return fmt.Errorf("%w: key is empty", ErrInvalidRequest)
		}
		if err := p.storeOf(store).Reset(ctx, backend.Key{Prefix: p.prefix, ID: keys[p.key]}, p.rule); err != nil {
			return err
		}
	}
	return nil
}

// check reports whether p can make a request of n units for keys.
func (p *part) check(keys []string, n int64) error {
	if keys[p.key] == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidRequest)
	}
	return p.rule.ValidateCost(n)
}

// request builds p's request of n units at now; check it first.
func (p *part) request(keys []string, n int64, now time.Time) backend.Request {
	return backend.Request{
		Key:       backend.Key{Prefix: p.prefix, ID: keys[p.key]},
		Rule:      p.rule,
		Now:       now,
		Cost:      n,
		OnFailure: p.onFailure,
		Shadow:    p.shadow,
	}
}

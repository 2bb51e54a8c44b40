// Package observe reports what a limiter does: every decision (its policy,
// outcome, latency and error, and whether a fallback made it), circuit
// breaker state changes, and memory-store evictions of active keys.
//
// Concurrency leases are reported too (Decision.Lease): acquired and denied
// by Take and TakeAll, released, renewed or found expired by Release and
// Renew, so that metrics can count the leases held.
//
// It works as a backend.Store wrapper, so the limiter needs no change:
//
//	obs := observe.Slog(logger) // or promobserve's Observer, or your own
//	lim, _ := limiter.New(observe.Wrap(store, obs), cfg)
//
// Wrap the outermost store: wrapping a fallback store sees its Degraded
// decisions, and its breaker changes come through
// fallback.WithStateHook(obs.BreakerHook("redis")). Evictions are counted by
// the memory store, not reported per call; WatchEvictions polls them.
//
// An Observer is a struct of optional funcs, like net/http/httptrace's
// ClientTrace: set the ones you need. They run in the goroutine of the call
// they describe, after it returns, so they must be quick and safe for
// concurrent use; a slow observer slows every request. OnDecision gets that
// call's context, so that logs and traces keep its values (trace ids).
//
// The package names stores only through backend and its capabilities
// (backend.EvictionCounter), so observing links neither the fallback store
// nor the memory store.
package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Op names the store call a Decision describes.
type Op string

// The store calls.
const (
	// Take decides a request and consumes it when admitted.
	Take Op = "take"
	// TakeAll decides several requests together.
	TakeAll Op = "take_all"
	// Peek reports without consuming.
	Peek Op = "peek"
	// Reset forgets a key; Allowed is meaningless for it.
	Reset Op = "reset"
	// Release gives back a concurrency lease; Allowed reports that it was
	// still held.
	Release Op = "release"
	// Renew extends a concurrency lease; Allowed reports that it was
	// still held (and is now renewed).
	Renew Op = "renew"
)

// LeaseEvent is what a call did to a concurrency lease
// (algorithms.Concurrency), for the lease metrics: held leases are those
// acquired, less those released and those found expired.
type LeaseEvent string

// The lease events.
const (
	// NoLease: the call held, freed or refused no lease (a rate limit, an
	// error, or a fallback's FailOpen admission, which keeps no lease).
	NoLease LeaseEvent = ""
	// LeaseAcquired: a Take or TakeAll admitted, holding a lease.
	LeaseAcquired LeaseEvent = "acquired"
	// LeaseDenied: a Take or TakeAll with a concurrency request was
	// denied (in Shadow mode too: the store held no lease).
	LeaseDenied LeaseEvent = "denied"
	// LeaseReleased: a Release gave back a held lease.
	LeaseReleased LeaseEvent = "released"
	// LeaseRenewed: a Renew extended a held lease.
	LeaseRenewed LeaseEvent = "renewed"
	// LeaseExpired: a Release or a Renew found the lease no longer held:
	// it expired while its holder still worked (or its key was reset, or
	// it was released before).
	LeaseExpired LeaseEvent = "expired"
)

// Decision describes one store call.
type Decision struct {
	// Op is the call.
	Op Op
	// Policy is the key prefix of the request: one per limit (for
	// TakeAll, the prefix of the request that decided, see
	// backend.Result.Rule).
	Policy string
	// Allowed reports an admitted request (false when Err is set).
	Allowed bool
	// Degraded reports a decision made by a fallback policy while the
	// primary store was unavailable.
	Degraded bool
	// Shadow reports a request for a limit in shadow mode
	// (limiter.Shadow): a denial was not enforced (outcome
	// "shadow_denied").
	Shadow bool
	// Cached reports a denial answered by a deny cache
	// (backend/denycache) without a store call.
	Cached bool
	// Cost is the units asked for (for TakeAll, the number of requests).
	Cost int64
	// Lease is what the call did to a concurrency lease; NoLease for a
	// rate limit.
	Lease LeaseEvent
	// LeasePolicy is the key prefix of the concurrency request, when
	// Lease is set: Policy, except for a TakeAll decided by a rate limit
	// beside the lease. Lease metrics are counted under it, so that a
	// lease acquired through TakeAll and released alone meet.
	LeasePolicy string
	// Latency is how long the store call took.
	Latency time.Duration
	// Err is the call's error: the store failed or the request was
	// invalid. A denial is not an error.
	Err error
}

// Outcome classifies d as "allowed", "denied", "shadow_denied" (a limit in
// shadow mode would have denied) or "error", the values of the outcome
// label of metrics; a Reset that succeeded is "reset", a Release
// "released" or "expired", a Renew "renewed" or "expired".
func (d Decision) Outcome() string {
	switch {
	case d.Err != nil:
		return "error"
	case d.Op == Reset:
		return "reset"
	case d.Op == Release || d.Op == Renew:
		return string(d.Lease)
	case d.Allowed:
		return "allowed"
	case d.Shadow:
		return "shadow_denied"
	default:
		return "denied"
	}
}

// BreakerChange is a circuit breaker state change, named.
type BreakerChange struct {
	// Breaker names the breaker (the name given to BreakerHook).
	Breaker string
	// StateChange is the transition, as fallback.WithStateHook passes it.
	backend.StateChange
}

// Evictions reports keys a memory store evicted while they were still
// inside their window: each got its full allowance back early.
type Evictions struct {
	// Store names the store (the name given to WatchEvictions).
	Store string
	// Active is the number evicted since the previous report.
	Active uint64
	// Total is the number evicted since the store was created.
	Total uint64
}

// Observer receives what a limiter does. Nil funcs are skipped; the zero
// Observer observes nothing.
type Observer struct {
	// OnDecision is called after every store call, with the call's
	// context: log with it (slog's *Context methods, LogAttrs) to keep
	// the request's trace id.
	OnDecision func(context.Context, Decision)
	// OnBreakerChange is called on every breaker state change passed to
	// a hook from BreakerHook. It gets no context: fallback's hook
	// carries none, and a change outlives the request that observed it.
	OnBreakerChange func(BreakerChange)
	// OnEvictions is called when an EvictionWatcher finds new active
	// evictions.
	OnEvictions func(Evictions)
}

// Join returns an Observer that passes everything to each of obs in turn,
// so that logs and metrics can watch the same store.
func Join(obs ...Observer) Observer {
	var j Observer
	var decisions []func(context.Context, Decision)
	var breakers []func(BreakerChange)
	var evictions []func(Evictions)
	for _, o := range obs {
		if o.OnDecision != nil {
			decisions = append(decisions, o.OnDecision)
		}
		if o.OnBreakerChange != nil {
			breakers = append(breakers, o.OnBreakerChange)
		}
		if o.OnEvictions != nil {
			evictions = append(evictions, o.OnEvictions)
		}
	}
	if len(decisions) > 0 {
		j.OnDecision = func(ctx context.Context, d Decision) {
			for _, f := range decisions {
				f(ctx, d)
			}
		}
	}
	if len(breakers) > 0 {
		j.OnBreakerChange = func(c BreakerChange) {
			for _, f := range breakers {
				f(c)
			}
		}
	}
	if len(evictions) > 0 {
		j.OnEvictions = func(e Evictions) {
			for _, f := range evictions {
				f(e)
			}
		}
	}
	return j
}

// BreakerHook returns a func for fallback.WithStateHook that reports the
// breaker's changes under name:
//
//	fallback.New(redisStore, fallback.WithStateHook(obs.BreakerHook("redis")))
func (o Observer) BreakerHook(name string) func(backend.StateChange) {
	return func(c backend.StateChange) {
		if o.OnBreakerChange != nil {
			o.OnBreakerChange(BreakerChange{Breaker: name, StateChange: c})
		}
	}
}

// Wrap returns a Store that forwards every call to s and reports it to obs.
// It returns nil for a nil s (limiter.New then reports the missing store).
// The Store is a backend.LeaseStore: Release and Renew are forwarded (an
// error when s holds no leases) and reported.
func Wrap(s backend.Store, obs Observer) backend.Store {
	if s == nil {
		return nil
	}
	return &store{Store: s, obs: obs}
}

// store embeds the wrapped Store so that it forwards every method of the
// interface; the ones it observes are overridden below.
type store struct {
	backend.Store
	obs Observer
}

var (
	_ backend.LeaseStore = (*store)(nil)
	_ backend.Wrapper    = (*store)(nil)
)

// Unwrap returns the wrapped store (backend.Wrapper): backend.As finds its
// capabilities and its own type (fallback.Store.Stats) through the observer.
func (s *store) Unwrap() backend.Store { return s.Store }

// Take forwards to the wrapped store and reports the decision.
func (s *store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.obs.OnDecision == nil {
		return s.Store.Take(ctx, req)
	}
	start := time.Now()
	res, err := s.Store.Take(ctx, req)
	s.reportLease(ctx, Take, req.Key.Prefix, req.Cost, start, res, err, req.Shadow,
		takeEvent(req.Rule.HoldsLeases(), res, err))
	return res, err
}

// takeEvent is the lease event of a Take or TakeAll: leases is whether a
// request holds leases.
func takeEvent(leases bool, res backend.Result, err error) LeaseEvent {
	switch {
	case err != nil || !leases:
		return NoLease
	case !res.Allowed:
		return LeaseDenied
	case res.Lease != 0:
		return LeaseAcquired
	}
	return NoLease // admitted keeping no lease (a fallback failing open)
}

// Release forwards to the wrapped store and reports the call.
func (s *store) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	ls, ok := backend.As[backend.LeaseStore](s.Store)
	if !ok {
		return false, errNoLeases(s.Store)
	}
	if s.obs.OnDecision == nil {
		return ls.Release(ctx, req, lease)
	}
	start := time.Now()
	held, err := ls.Release(ctx, req, lease)
	event := LeaseReleased
	if !held {
		event = LeaseExpired
	}
	if err != nil {
		event = NoLease
	}
	s.reportLease(ctx, Release, req.Key.Prefix, req.Cost, start, backend.Result{Allowed: held}, err, req.Shadow, event)
	return held, err
}

// Renew forwards to the wrapped store and reports the call.
func (s *store) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	ls, ok := backend.As[backend.LeaseStore](s.Store)
	if !ok {
		return backend.Result{}, errNoLeases(s.Store)
	}
	if s.obs.OnDecision == nil {
		return ls.Renew(ctx, req, lease)
	}
	start := time.Now()
	res, err := ls.Renew(ctx, req, lease)
	event := LeaseRenewed
	if !res.Allowed {
		event = LeaseExpired
	}
	if err != nil {
		event = NoLease
	}
	s.reportLease(ctx, Renew, req.Key.Prefix, req.Cost, start, res, err, req.Shadow, event)
	return res, err
}

func leasePolicyOf(e LeaseEvent, policy string) string {
	if e == NoLease {
		return ""
	}
	return policy
}

func errNoLeases(st backend.Store) error {
	return fmt.Errorf("observe: the wrapped store %T holds no leases (it implements no backend.LeaseStore)", st)
}

// Peek forwards to the wrapped store and reports the decision.
func (s *store) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.obs.OnDecision == nil {
		return s.Store.Peek(ctx, req)
	}
	start := time.Now()
	res, err := s.Store.Peek(ctx, req)
	s.report(ctx, Peek, req.Key.Prefix, req.Cost, start, res, err, req.Shadow)
	return res, err
}

// Reset forwards to the wrapped store and reports the call.
func (s *store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	if s.obs.OnDecision == nil {
		return s.Store.Reset(ctx, key, rule, now)
	}
	start := time.Now()
	err := s.Store.Reset(ctx, key, rule, now)
	s.report(ctx, Reset, key.Prefix, 0, start, backend.Result{}, err, false)
	return err
}

func (s *store) report(ctx context.Context, op Op, policy string, cost int64, start time.Time, res backend.Result, err error, shadow bool) {
	s.reportLease(ctx, op, policy, cost, start, res, err, shadow, NoLease)
}

func (s *store) reportLease(ctx context.Context, op Op, policy string, cost int64, start time.Time, res backend.Result, err error, shadow bool, event LeaseEvent) {
	s.obs.OnDecision(ctx, Decision{
		Op:       op,
		Policy:   policy,
		Allowed:  err == nil && res.Allowed,
		Degraded: err == nil && res.Degraded,
		Shadow:   shadow,
		Cached:   err == nil && res.Cached,
		Cost:     cost,
		Lease:    event,
		Latency:  time.Since(start),
		// Take, Release and Renew concern one request: its prefix.
		LeasePolicy: leasePolicyOf(event, policy),
		Err:         err,
	})
}

// EvictionWatcher reports a memory store's active evictions. The store only
// counts them (backend.EvictionCounter), so the watcher compares the count with the
// previous one: call Check on your own schedule, or Run.
type EvictionWatcher struct {
	name  string
	store backend.EvictionCounter
	obs   Observer

	mu   sync.Mutex
	last uint64
}

// WatchEvictions returns a watcher of s's active evictions (s is usually a
// *memorystore.Store) that reports to obs under name. Evictions before the
// call are not reported.
func WatchEvictions(name string, s backend.EvictionCounter, obs Observer) (*EvictionWatcher, error) {
	if isNil(s) {
		return nil, errors.New("observe: memory store is nil")
	}
	return &EvictionWatcher{name: name, store: s, obs: obs, last: s.ActiveEvictions()}, nil
}

// isNil reports a nil interface or a nil pointer in one, such as a
// (*memorystore.Store)(nil) that would panic when called.
func isNil(s backend.EvictionCounter) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Check reads the store's count and, when it grew since the last Check,
// reports the growth to OnEvictions. It returns what it found, reported or
// not.
func (w *EvictionWatcher) Check() Evictions {
	w.mu.Lock()
	total := w.store.ActiveEvictions()
	e := Evictions{Store: w.name, Active: total - w.last, Total: total}
	w.last = total
	w.mu.Unlock()
	if e.Active > 0 && w.obs.OnEvictions != nil {
		w.obs.OnEvictions(e)
	}
	return e
}

// Run calls Check every interval until ctx ends, then returns ctx's error.
// The interval must be positive.
func (w *EvictionWatcher) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("observe: eviction check interval is %v; it must be positive", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			w.Check()
		}
	}
}

// Slog returns an Observer that logs to l: store errors at Warn, decisions
// at Debug (checked with Enabled first, so disabled debug logging costs
// little), a breaker opening at Warn and its other changes at Info, and
// active evictions at Warn. Decisions are logged with their call's context,
// so a handler that reads trace ids from it sees them. The fallback store already logs its breaker
// changes; use this hook for them only if you do not use its logger. A nil l
// logs to slog.Default().
func Slog(l *slog.Logger) Observer {
	if l == nil {
		l = slog.Default()
	}
	return Observer{
		OnDecision: func(ctx context.Context, d Decision) {
			if d.Err != nil {
				l.LogAttrs(ctx, slog.LevelWarn, "limitkit: store call failed",
					slog.String("op", string(d.Op)), slog.String("policy", d.Policy),
					slog.Duration("latency", d.Latency), slog.Any("error", d.Err))
				return
			}
			if !l.Enabled(ctx, slog.LevelDebug) {
				return
			}
			l.LogAttrs(ctx, slog.LevelDebug, "limitkit: decision",
				slog.String("op", string(d.Op)), slog.String("policy", d.Policy),
				slog.String("outcome", d.Outcome()), slog.Bool("degraded", d.Degraded),
				slog.Bool("cached", d.Cached), slog.Int64("cost", d.Cost), slog.Duration("latency", d.Latency))
		},
		OnBreakerChange: func(c BreakerChange) {
			level := slog.LevelInfo
			if c.To == backend.BreakerOpen {
				level = slog.LevelWarn
			}
			l.LogAttrs(context.Background(), level, "limitkit: circuit breaker state changed",
				slog.String("breaker", c.Breaker), slog.String("from", string(c.From)), slog.String("to", string(c.To)))
		},
		OnEvictions: func(e Evictions) {
			l.LogAttrs(context.Background(), slog.LevelWarn,
				"limitkit: memory store evicted keys inside their window; raise memorystore.WithMaxKeys",
				slog.String("store", e.Store), slog.Uint64("evicted", e.Active), slog.Uint64("total", e.Total))
		},
	}
}

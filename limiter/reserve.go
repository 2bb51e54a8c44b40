package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/boundid"
)

// Reports of Reservation.Settle and Cancel; test with errors.Is. Neither
// changed anything in the store.
var (
	// ErrReservationSettled reports a reservation settled or cancelled
	// before: a reservation settles at most once.
	ErrReservationSettled = errors.New("limiter: reservation already settled")
	// ErrReservationExpired reports a reservation not settled within its
	// limit's ReservationTimeout: it ended counting its estimate.
	ErrReservationExpired = errors.New("limiter: reservation expired (not settled within the reservation timeout); it counted its estimate")
)

// DefaultReservationTimeout is the ReservationTimeout of a Config that
// sets none: longer than the streams an LLM gateway serves, short enough
// that a crashed holder's reservation is not settled hours later.
const DefaultReservationTimeout = 10 * time.Minute

// Reservation is an estimate of a cost known only after the work (the
// tokens of an LLM response) held on a key: ReserveN admits it as AllowN
// would and counts the estimate at once; Settle replaces it with the
// actual cost, giving back what was not used or charging the excess as
// debt that the next requests wait out; Cancel gives it all back.
//
//	res, d, err := lim.ReserveN(ctx, apiKey, maxTokens)
//	if err != nil { ... } // the store failed, or the limit cannot reserve
//	if res == nil { ... } // denied: d.RetryAfter says when to come back
//	used := serve()
//	_, err = res.Settle(context.WithoutCancel(ctx), used)
//
// A reservation never settled (a crashed process, an aborted stream)
// counts as its estimate, and ends by itself after the limit's
// ReservationTimeout: Settle then returns ErrReservationExpired and
// changes nothing. Settle and Cancel run at most once
// (ErrReservationSettled). The bound: in any window the units counted are
// at most the limit plus the settled excesses (actual - estimate, where
// positive) of the window; with estimates at least the actual costs,
// never over the limit. A Reservation is safe for concurrent use.
//
// The reservation of an exempt key (Config.Exempt) holds nothing, and
// settling it does nothing.
type Reservation struct {
	lim      *Limiter
	store    backend.Reserver
	clock    clock.Clock
	req      backend.Request // the reservation's request: key, rule, estimate, time
	at       int64           // where the store recorded it (backend.Reserver)
	expires  time.Time
	holds    bool
	mu       sync.Mutex
	finished bool
	// parts are a Composite's reservations, one per limit (req and at
	// are the first's); nil for a Limiter's.
	parts []reservedPart
}

// Key returns the key the reservation holds units on.
func (r *Reservation) Key() string { return r.req.Key.ID }

// Estimate returns the units the reservation holds.
func (r *Reservation) Estimate() int64 { return r.req.Cost }

// Expires returns when the reservation ends by itself, counting its
// estimate, unless settled before: its reservation time plus the limit's
// ReservationTimeout, by the limiter's clock.
func (r *Reservation) Expires() time.Time { return r.expires }

// ReserveN holds estimate units on key, admitted or refused exactly as
// AllowN(ctx, key, estimate) would be (estimate between 1 and the limit).
// Admitted, it returns the Reservation, to settle with the actual cost;
// refused, a nil Reservation and the denial. A concurrency limit, a limit
// with a guard or in Shadow mode, and a store that cannot give back one
// admission's units (a backend.Reserver) are refused with an error that
// says why; so are the algorithms that cannot record an excess as debt
// (see ChargeN). A key on Config.Exempt gets a Reservation that holds
// nothing; one on Config.Deny is denied.
func (l *Limiter) ReserveN(ctx context.Context, key string, estimate int64) (*Reservation, Decision, error) {
	c := l.current()
	rs, err := l.reservable(c)
	if err != nil {
		return nil, Decision{}, err
	}
	now := l.clock.Now()
	p := &c.all[0]
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			if !d.Allowed {
				return nil, d, nil
			}
			if err := p.rule.ValidateCost(estimate); err != nil {
				return nil, Decision{}, restate(ErrInvalidRequest, err)
			}
			return l.newReservation(rs, c, p, key, estimate, now, 0, false), d, nil
		}
	}
	keys := [1]string{key}
	if err := c.checkRequest(keys[:], estimate); err != nil {
		return nil, Decision{}, err
	}
	req := p.request(keys[:], estimate, now)
	d, at, err := rs.Reserve(ctx, req)
	if err != nil || !d.Allowed {
		return nil, d, err
	}
	return l.newReservation(rs, c, p, key, estimate, now, at, true), d, nil
}

// reservable checks that c can reserve on l's store, and returns the
// store's Reserver.
func (l *Limiter) reservable(c *compiled) (backend.Reserver, error) {
	switch {
	case c.lease >= 0:
		return nil, invalidf(ErrInvalidRequest,
			"this is a concurrency limit; reserve on a rate limit (a concurrency limit bounds what is in flight, use Acquire)")
	case len(c.all) != 1 || c.all[0].shadow:
		return nil, invalidf(ErrInvalidRequest,
			"ReserveN reserves on one enforced rule; this limit has a guard or is in Shadow mode: give the guard a limiter of its own, or set mode enforce")
	}
	if err := c.all[0].rule.CheckCharge(); err != nil {
		return nil, restate(ErrInvalidRequest, fmt.Errorf("a reservation's excess is charged: %w", err))
	}
	rs, ok := backend.As[backend.Reserver](l.store)
	if !ok {
		return nil, invalidf(ErrInvalidConfig,
			"store %T cannot reserve (it implements no backend.Reserver); use a store of this module, or forward Reserve and Unreserve in your wrapper", l.store)
	}
	return rs, nil
}

func (l *Limiter) newReservation(rs backend.Reserver, c *compiled, p *part, key string, estimate int64, now time.Time, at int64, holds bool) *Reservation {
	keys := [1]string{key}
	return &Reservation{lim: l, store: rs, clock: l.clock, req: p.request(keys[:], estimate, now), at: at,
		expires: now.Add(c.config.ReservationTimeout), holds: holds}
}

// Settle replaces the reservation's estimate with actual, the cost the
// work turned out to have (0 or more): when less, the difference is given
// back, from the units the reservation recorded (backend.Reserver); when
// more, the excess is charged (ChargeN) and the next requests wait it out.
// The Decision describes the key afterwards, Allowed (the settlement was
// recorded), Remaining never below 0. Settle runs once: after Settle or
// Cancel it returns ErrReservationSettled, after the reservation's Expires
// ErrReservationExpired, and changes nothing. A store error is returned
// and the reservation is settled all the same (it is not retried: a retry
// could give back twice); a refund lost so leaves its units counted until
// they slide out, never over the limit.
func (r *Reservation) Settle(ctx context.Context, actual int64) (Decision, error) {
	if actual < 0 {
		return Decision{}, invalidf(ErrInvalidRequest, "actual cost %d is negative; settle with 0 or more (0 gives it all back)", actual)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return Decision{}, ErrReservationSettled
	}
	now := r.clock.Now()
	r.finished = true
	if now.After(r.expires) {
		return Decision{}, fmt.Errorf("limiter: settle of the reservation on %s: %w", boundid.Quote(r.req.Key.ID), ErrReservationExpired)
	}
	if !r.holds {
		return Decision{Allowed: true, Exempt: true, Limit: r.req.Rule.Limit, Remaining: r.req.Rule.Limit}, nil
	}
	if r.parts != nil {
		return settleParts(ctx, r.store, r.parts, actual, now)
	}
	est := r.req.Cost
	switch {
	case actual < est:
		req := r.req
		req.Cost, req.Now = est-actual, now
		d, err := r.store.Unreserve(ctx, req, r.at)
		if err != nil {
			return Decision{}, err
		}
		d.Allowed, d.RetryAfter = true, 0
		return d, nil
	case actual > est:
		return r.lim.ChargeN(ctx, r.req.Key.ID, actual-est)
	}
	req := r.req
	req.Cost, req.Now = 1, now
	d, err := r.lim.store.Peek(ctx, req)
	d.Allowed, d.RetryAfter = true, 0
	return d, err
}

// Cancel gives the whole reservation back, as Settle(ctx, 0): for work
// that was not done. It returns nil, ErrReservationSettled,
// ErrReservationExpired, or the store's error.
func (r *Reservation) Cancel(ctx context.Context) error {
	_, err := r.Settle(ctx, 0)
	return err
}

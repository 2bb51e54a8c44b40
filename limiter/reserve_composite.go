package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// reservedPart is one limit's share of a Composite's reservation: its
// request (the estimate, at the reservation's time) and where the store
// recorded it.
type reservedPart struct {
	store backend.Store // the composite's, for charges and Peeks
	req   backend.Request
	at    int64
}

// ReserveN holds estimate units on every limit of the composite, keys[i]
// on limit i, all or nothing: admitted or refused as AllowN(ctx, keys,
// estimate) would be. The limits are reserved in order, and when one
// refuses (or its store fails) those reserved before are given back, so a
// refusal holds nothing; concurrent calls may see those units held for
// that moment. Settle and Cancel apply to every limit: a refund from each
// limit's own units, an excess charged on each. The reservation ends by
// itself after the shortest ReservationTimeout of the limits; its Key is
// limit 0's. A composite with a concurrency limit or a limit in Shadow
// mode, or on a store that is no backend.Reserver, is refused with an error
// that says why, as Limiter.ReserveN refuses one.
func (c *Composite) ReserveN(ctx context.Context, keys []string, estimate int64) (*Reservation, Decision, error) {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, keys); err != nil {
		return nil, Decision{}, err
	}
	rs, err := compositeReservable(cc, c.store)
	if err != nil {
		return nil, Decision{}, err
	}
	if err := cc.checkRequest(keys, estimate); err != nil {
		return nil, Decision{}, err
	}
	now := c.clock.Now()
	parts := make([]reservedPart, 0, len(cc.enforce))
	results := make([]Decision, 0, len(cc.enforce))
	timeout := time.Duration(0)
	for i := range cc.enforce {
		p := &cc.enforce[i]
		req := p.request(keys, estimate, now)
		d, at, err := rs.Reserve(ctx, req)
		if err != nil || !d.Allowed {
			unreserveParts(context.WithoutCancel(ctx), rs, parts, now)
			d.Rule = p.index
			return nil, d, err
		}
		parts = append(parts, reservedPart{store: c.store, req: req, at: at})
		results = append(results, d)
		if t := cc.configs[p.key].ReservationTimeout; timeout == 0 || t < timeout {
			timeout = t
		}
	}
	r := &Reservation{store: rs, clock: c.clock, req: parts[0].req, at: parts[0].at,
		expires: now.Add(timeout), holds: true, parts: parts}
	return r, backend.Combine(results), nil
}

// compositeReservable checks that cc can reserve on store, and returns the
// store's Reserver.
func compositeReservable(cc *compiled, store backend.Store) (backend.Reserver, error) {
	switch {
	case cc.lease >= 0:
		return nil, invalidf(ErrInvalidRequest,
			"the composite has a concurrency limit; reserve on rate limits (a concurrency limit bounds what is in flight, use Acquire)")
	case len(cc.shadow) > 0:
		return nil, invalidf(ErrInvalidRequest,
			"ReserveN reserves on enforced limits; limit %d is in Shadow mode: set mode enforce, or give it a composite of its own", cc.shadow[0].index)
	}
	for i := range cc.enforce {
		if err := cc.enforce[i].rule.CheckCharge(); err != nil {
			return nil, restate(ErrInvalidRequest, fmt.Errorf("limit %d: a reservation's excess is charged: %w", cc.enforce[i].index, err))
		}
	}
	rs, ok := backend.As[backend.Reserver](store)
	if !ok {
		return nil, invalidf(ErrInvalidConfig,
			"store %T cannot reserve (it implements no backend.Reserver); use a store of this module, or forward Reserve and Unreserve in your wrapper", store)
	}
	return rs, nil
}

// unreserveParts gives back the estimates of parts, reserved by a
// composite reservation that another limit refused. A failed refund leaves
// its units counted until they slide out, never over the limit.
func unreserveParts(ctx context.Context, rs backend.Reserver, parts []reservedPart, now time.Time) {
	for _, p := range parts {
		req := p.req
		req.Now = now
		_, _ = rs.Unreserve(ctx, req, p.at)
	}
}

// settleParts settles a composite reservation at actual on each of its
// limits: a refund of the difference from each limit's own units, an
// excess charged on each, or, at the estimate, a Peek of each. Every limit
// is settled even when one's store fails; the errors are joined.
func settleParts(ctx context.Context, rs backend.Reserver, parts []reservedPart, actual int64, now time.Time) (Decision, error) {
	results := make([]Decision, len(parts))
	var errs []error
	for i, p := range parts {
		req := p.req
		req.Now = now
		est := req.Cost
		var d Decision
		var err error
		switch {
		case actual < est:
			req.Cost = est - actual
			d, err = rs.Unreserve(ctx, req, p.at)
		case actual > est:
			req.Cost, req.Charge = actual-est, true
			d, err = p.store.Take(ctx, req)
		default:
			req.Cost = 1
			d, err = p.store.Peek(ctx, req)
		}
		if err != nil {
			errs = append(errs, err)
		}
		d.Allowed, d.RetryAfter = true, 0
		results[i] = d
	}
	if err := errors.Join(errs...); err != nil {
		return Decision{}, err
	}
	return backend.Combine(results), nil
}

// ReserveN reserves estimate units for key under the plan the resolver
// chooses (see Limiter.ReserveN), and returns the plan's name with the
// reservation. Settle or Cancel it as any reservation: it stays on the
// plan it was made on, even if the key's plan changes meanwhile.
func (p *Plans) ReserveN(ctx context.Context, key string, estimate int64) (*Reservation, Decision, string, error) {
	name, l, err := p.Resolve(ctx, key)
	if err != nil {
		return nil, Decision{}, name, err
	}
	res, d, err := l.ReserveN(ctx, key, estimate)
	return res, d, name, err
}

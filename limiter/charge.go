package limiter

import (
	"context"
	"errors"

	"github.com/limitkit/limitkit/algorithms"
)

// ChargeN records n units already spent by key (a cost known after the
// work, such as the tokens of a response) on every rule of the limit,
// enforced and shadow: a charge is never refused for want of allowance,
// and units beyond what is left are debt that later Allow calls wait out
// (see backend.Request.Charge). The Decision is Allowed (it was recorded),
// with Remaining 0 when the key is in debt, never below, and ResetAfter
// when the debt has gone. n may exceed the limit, up to
// algorithms.MaxCharge (less for gcra, Rule.ChargeBound). Exempt and
// deny-listed keys are charged nothing. A concurrency limit refuses it
// with an error wrapping ErrInvalidRequest that says why. Each rule is charged in its own call:
// a charge needs no all-or-nothing, and one rule's store failing leaves
// the others charged.
func (l *Limiter) ChargeN(ctx context.Context, key string, n int64) (Decision, error) {
	c := l.current()
	if c.lease >= 0 {
		return Decision{}, errUseAcquire
	}
	if c.lists != nil {
		if d, ok := c.listed(key); ok {
			return d, nil
		}
	}
	if key == "" {
		return Decision{}, errEmptyKey
	}
	keys := [1]string{key}
	now := l.clock.Now()
	var out Decision
	var errs []error
	first := true
	for _, parts := range [2][]part{c.enforce, c.shadow} {
		for i := range parts {
			p := &parts[i]
			req := p.request(keys[:], n, now)
			req.Charge = true
			d, err := p.storeOf(l.store).Take(ctx, req)
			if errors.Is(err, algorithms.ErrInvalidRequest) || errors.Is(err, algorithms.ErrInvalidRule) {
				err = restate(ErrInvalidRequest, err)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d.Rule = p.index
			if first || d.Remaining < out.Remaining {
				out, first = d, false
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Decision{}, err
	}
	return out, nil
}

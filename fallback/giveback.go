package fallback

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/limitkit/backend"
)

// GiveBack gives units back (backend.UnitRefunder, Envoy's negative hits)
// through the primary while it answers. While it does not, a request whose
// policy decides locally gives them back to the local store, at the share
// it takes at, so that local limiting sees them; other policies count
// nothing locally and give nothing back (the result is a Peek by policy).
// A primary that cannot give units back is an error.
func (s *Store) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	primary, ok := backend.As[backend.UnitRefunder](s.primary)
	if !ok {
		return backend.Result{}, fmt.Errorf("fallback: the primary store %T cannot give units back (it implements no backend.UnitRefunder)", s.primary)
	}
	b := s.breakerFor(ctx, req.Key)
	res, err := s.execute(ctx, b, func(ctx context.Context) (backend.Result, error) { return primary.GiveBack(ctx, req) })
	if err == nil {
		return res, nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return backend.Result{}, ce.err
	}
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	if _, err := backend.GiveBackWindow(req.Rule, req.Millis()); err != nil {
		return backend.Result{}, err
	}
	s.degraded.Add(1)
	b.degraded.Add(1)
	res, isLocal := s.byPolicy(b, &req)
	if !isLocal {
		return res, nil
	}
	local, ok := backend.As[backend.UnitRefunder](s.local)
	if !ok {
		return backend.Result{}, fmt.Errorf("fallback: the local store %T cannot give units back", s.local)
	}
	if res, err = local.GiveBack(ctx, req); err != nil {
		return backend.Result{}, fmt.Errorf("fallback: local store: %w", err)
	}
	res.Degraded = true
	return res, nil
}

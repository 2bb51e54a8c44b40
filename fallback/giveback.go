package fallback

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/backend"
)

// GiveBack gives units back (backend.UnitRefunder, Envoy's negative hits)
// through the primary while it answers. While it does not, a request whose
// policy decides locally gives them back to the local store, at the share
// it takes at, so that local limiting sees them; other policies count
// nothing locally and give nothing back (the result is a Peek by policy).
// A primary that cannot give units back is an error, and so is an
// algorithm that cannot (algorithms.Rule.CheckGiveBack), up or down.
func (s *Store) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	primary, ok := backend.As[backend.UnitRefunder](s.primary)
	if !ok {
		return backend.Result{}, fmt.Errorf("fallback: the primary store %T cannot give units back (it implements no backend.UnitRefunder)", s.primary)
	}
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	if err := req.Rule.CheckGiveBack(); err != nil {
		return backend.Result{}, err
	}
	return s.step(ctx, req, primary.GiveBack, giveBackLocally, localGiveBack)
}

// giveBackLocally is a localCall: the local store's GiveBack.
func giveBackLocally(local backend.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
	r, ok := backend.As[backend.UnitRefunder](local)
	if !ok {
		return backend.Result{}, fmt.Errorf("fallback: the local store %T cannot give units back; give WithLocalStore a store that can (memorystore)", local)
	}
	return r.GiveBack(ctx, req)
}

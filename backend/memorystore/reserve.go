package memorystore

import (
	"context"

	"github.com/limitkit/limitkit/backend"
)

var _ backend.Reserver = (*Store)(nil)

// Reserve implements backend.Reserver: Take, and where the admission
// recorded its units (algorithms.Rule.ChargedAt), read under the same lock.
func (s *Store) Reserve(_ context.Context, req backend.Request) (backend.Result, int64, error) {
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, 0, err
	}
	now := req.Millis()
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	res := s.takeLocked(sh, h1, h2, a, &req.Rule, now, req.Cost, req.Charge)
	if !res.Allowed {
		return res, 0, nil
	}
	e := sh.table.find(h1, h2) // inserted by takeLocked
	return res, req.Rule.ChargedAt(&e.state, now), nil
}

// Unreserve implements backend.Reserver: algorithms.Rule.Refund of
// req.Cost units recorded at at, then what a Peek of req reports.
func (s *Store) Unreserve(_ context.Context, req backend.Request, at int64) (backend.Result, error) {
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, err
	}
	now := req.Millis()
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.table.find(h1, h2)
	if e == nil {
		return backend.ResultOf(req.Rule, peekLocked(sh, h1, h2, a, &req, now)), nil
	}
	return backend.ResultOf(req.Rule, req.Rule.Refund(&e.state, now, at, req.Cost)), nil
}

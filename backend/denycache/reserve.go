package denycache

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/backend"
)

var _ backend.Reserver = (*Store)(nil)

// reserverOf returns inner's backend.Reserver, or an error naming it.
func reserverOf(inner backend.Store) (backend.Reserver, error) {
	r, ok := backend.As[backend.Reserver](inner)
	if !ok {
		return nil, fmt.Errorf("denycache: the inner store %T cannot reserve (it implements no backend.Reserver)", inner)
	}
	return r, nil
}

// Reserve forwards to the inner store, never from a remembered denial (a
// reservation is rarely of one unit), and forgets what was remembered for
// the key: an admission moves it on.
func (s *Store) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	r, err := reserverOf(s.inner)
	if err != nil {
		return backend.Result{}, 0, err
	}
	res, at, err := r.Reserve(ctx, req)
	h := s.hash(req.Key, req.Rule.Algorithm)
	s.forget(&s.shards[h[0]%shards], h)
	return res, at, err
}

// Unreserve forwards to the inner store, then, as a refund, drops the
// key's entry here and tells the other processes (GiveBack's path): a
// denial remembered anywhere no longer holds.
func (s *Store) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	r, err := reserverOf(s.inner)
	if err != nil {
		return backend.Result{}, err
	}
	res, err := r.Unreserve(ctx, req, at)
	if err == nil {
		s.announceRefund(req.Key, req.Rule.Algorithm)
	}
	return res, err
}

package fallback

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/boundid"
)

// Local lease ids. The local store's ids are times (1/1000 ms, below
// 2^53), so two processes granting in the same instant would issue the
// same id, and a Release by id in one would free the other's holder. A
// local lease's id is therefore the local id with this store's tag in the
// bits above 2^53, negated: an id another store (another process) granted
// carries another tag and is refused as not held, with no store call.
const (
	localIDBits = 53
	localIDMask = 1<<localIDBits - 1
	tagBits     = 63 - localIDBits // 10: one in 1,023 tags shared by two stores
)

// processSeed (random) makes the tags of this process's stores unlike
// another's.
var processSeed = maphash.MakeSeed()

// tag is this store's local lease tag, 1 to 2^10-1: a hash of the
// process's random seed and the store's shared state, which all its policy
// views (WithPolicy) share, so any of them releases its leases.
func (s *Store) tag() int64 {
	return int64(maphash.Comparable(processSeed, s.shared)%(1<<tagBits-1)) + 1
}

// localLease is the lease id of a local store's lease id (0: none).
func (s *Store) localLease(id int64) int64 {
	if id <= 0 || id > localIDMask {
		return -id // an id out of range is the local store's to refuse
	}
	return -(s.tag()<<localIDBits | id)
}

// localID is the local store's id of a local lease id, and false when this
// store did not grant it.
func (s *Store) localID(lease int64) (int64, bool) {
	v := -lease
	if v>>localIDBits != s.tag() {
		return 0, false
	}
	return v & localIDMask, true
}

// Release implements backend.LeaseStore. A local lease (a negative id,
// granted by a Local policy) is released on the local store, whatever the
// breaker's state, and only by the store that granted it (another
// process's local lease is not held here); any other on the primary,
// through the breaker and with its deadline. When the primary cannot be reached the error wraps
// ErrUnavailable: the lease stays held there until it expires or a later
// Release succeeds.
func (s *Store) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if lease < 0 {
		orig := req
		local, err := s.localLeases(&req)
		if err != nil {
			return false, err
		}
		id, ours := s.localID(lease)
		if !ours {
			return false, nil
		}
		held, err := local.Release(ctx, req, id)
		if err != nil {
			return false, fmt.Errorf("fallback: local store: %w", err)
		}
		if held {
			s.creditLocal(orig)
		}
		return held, nil
	}
	primary, err := leasesOf(s.primary, "primary")
	if err != nil {
		return false, err
	}
	// The answer travels in the Result: a call abandoned at its deadline
	// may still write to variables of this frame.
	res, err := s.execute(ctx, s.breakerForRequest(ctx, &req), func(ctx context.Context) (backend.Result, error) {
		held, err := primary.Release(ctx, req, lease)
		return backend.Result{Allowed: held}, err
	})
	if err != nil {
		return false, s.leaseError("release", &req, err)
	}
	if res.Allowed {
		s.base.released(&req)
	}
	return res.Allowed, nil
}

// Renew implements backend.LeaseStore. Like Release, a local lease is
// renewed on the local store that granted it (the new id negated again, the Result
// Degraded) and any other on the primary; when the primary cannot be
// reached the error wraps ErrUnavailable and the lease is unchanged.
func (s *Store) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if lease < 0 {
		local, err := s.localLeases(&req)
		if err != nil {
			return backend.Result{}, err
		}
		id, ours := s.localID(lease)
		if !ours {
			// Not held here: refused as the local store refuses a lease
			// it does not hold.
			return backend.Result{Limit: req.Rule.Limit, Degraded: true}, nil
		}
		res, err := local.Renew(ctx, req, id)
		if err != nil {
			return backend.Result{}, fmt.Errorf("fallback: local store: %w", err)
		}
		res.Lease = s.localLease(res.Lease)
		res.Degraded = true
		return res, nil
	}
	primary, err := leasesOf(s.primary, "primary")
	if err != nil {
		return backend.Result{}, err
	}
	res, err := s.execute(ctx, s.breakerForRequest(ctx, &req), func(ctx context.Context) (backend.Result, error) {
		return primary.Renew(ctx, req, lease)
	})
	if err != nil {
		return backend.Result{}, s.leaseError("renewal", &req, err)
	}
	s.base.record(&req, &res)
	return res, nil
}

// localLeases returns the local store and scales req's limit to this
// instance's share, as a Local policy granted the lease under (the limit
// stays at least the lease's cost, so that a lowered limit still lets it
// go).
func (s *Store) localLeases(req *backend.Request) (backend.LeaseStore, error) {
	// Checked here, not only by the local store: a lease this store did not
	// grant is refused without it.
	if err := backend.ValidateLease(req); err != nil {
		return nil, err
	}
	local, err := leasesOf(s.local, "local")
	if err != nil {
		return nil, err
	}
	if p := s.policyOf(req); p.Mode() == backend.ModeLocal {
		req.Rule.Limit = max((req.Rule.Limit+p.Instances()-1)/p.Instances(), req.Cost)
	}
	return local, nil
}

func leasesOf(st backend.Store, role string) (backend.LeaseStore, error) {
	if ls, ok := st.(backend.LeaseStore); ok {
		return ls, nil
	}
	return nil, fmt.Errorf("fallback: the %s store %T holds no leases (it implements no backend.LeaseStore)", role, st)
}

// leaseError is the error of a lease's release or renewal the primary did
// not answer: req's own fault when it is invalid (the primary did not
// check it), else ErrUnavailable.
func (s *Store) leaseError(what string, req *backend.Request, err error) error {
	if ce, ok := errors.AsType[callerError](err); ok {
		return ce.err
	}
	if bad := backend.ValidateLease(req); bad != nil {
		return bad
	}
	return fmt.Errorf("%w: %s of a lease on %s (it is released when it expires): %w", ErrUnavailable, what, boundid.Quote(req.Key.ID), err)
}

// creditLocal takes a released local lease's units (req as given, before
// scaling to a share) off what its key's baseline counted.
func (s *Store) creditLocal(req backend.Request) {
	if s.base == nil {
		return
	}
	defer s.base.lock(&req)()
	if bd := s.base.boundOf(&req, req.Rule, 1); bd.e != nil {
		bd.credit(req.Cost)
	}
}

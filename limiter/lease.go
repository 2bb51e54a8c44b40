package limiter

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/boundid"
)

// Reports of Lease.Release, Lease.Renew and Release by id; test with
// errors.Is. None of them changed anything in the store.
var (
	// ErrLeaseNotHeld reports a lease that is no longer held: it expired
	// (its holder kept it longer than the limit's Window without renewing
	// it), its key was reset, or it was already released by id.
	ErrLeaseNotHeld = errors.New("limiter: lease not held (it expired, or its key was reset)")
	// ErrLeaseReleased reports a Lease released (or found not held) before.
	ErrLeaseReleased = errors.New("limiter: lease already released")
	// ErrLeaseKey reports a lease id given with another key than the one
	// it was granted on.
	ErrLeaseKey = errors.New("limiter: lease id was granted on another key")
)

// errUseAcquire refuses Allow, AllowN and Wait on a concurrency limit.
var errUseAcquire = invalidf(ErrInvalidRequest, "this is a concurrency limit; use Acquire and release the lease: an Allow would hold a slot until the lease timeout")

// noConcurrency refuses Acquire on a limit that is not a concurrency limit.
func noConcurrency(c *compiled) error {
	return invalidf(ErrInvalidRequest,
		"this limit is not a concurrency limit (algorithm %q); use Allow, or set the algorithm to %q", c.config.Algorithm, "concurrency")
}

// Lease is a share of a concurrency limit held by one caller: Acquire
// grants it, Release gives it back. A lease not released within the
// limit's Window (the lease timeout) expires on its own, so a holder that
// crashed or hung does not hold its slots forever; Renew extends it for
// long work. Release it in a defer:
//
//	lease, d, err := lim.Acquire(ctx, userID)
//	if err != nil { ... } // the store failed
//	if lease == nil { ... } // denied: d.RetryAfter says when a lease expires at the latest
//	defer lease.Release(context.WithoutCancel(ctx))
//
// Releasing twice (ErrLeaseReleased) and releasing a lease that expired
// (ErrLeaseNotHeld) are reported and harmless. A Lease is safe for
// concurrent use.
//
// Some leases hold nothing in the store, and their Release and Renew do
// nothing: the lease of an exempt key (Config.Exempt), of a request a
// fallback store admitted with FailOpen while Redis was down, and of a
// request a concurrency limit in Shadow mode would have denied
// (Decision.ShadowDenied).
type Lease struct {
	src   leaseSource
	store backend.Store
	clock clock.Clock
	key   string
	cost  int64
	// granted is the rule the lease was granted under; Release and Renew
	// use the rule in force (a SetConfig may have changed the limit or
	// the window) when it still counts under the same prefix.
	granted part

	mu       sync.Mutex
	id       int64 // 0: holds nothing in the store
	expires  time.Time
	released bool
}

// leaseSource is what leases are granted by: a Limiter or a Composite.
type leaseSource interface {
	leaseConfig() *compiled
}

func (l *Limiter) leaseConfig() *compiled   { return l.current() }
func (c *Composite) leaseConfig() *compiled { return c.cur.Load() }

func newLease(src leaseSource, store backend.Store, clk clock.Clock, key string, cost int64, granted part, id int64, now time.Time) *Lease {
	return &Lease{src: src, store: store, clock: clk, key: key, cost: cost, granted: granted, id: id,
		expires: now.Truncate(time.Millisecond).Add(granted.rule.Window)}
}

// Key returns the key the lease was granted on (for a Composite, the
// concurrency limit's key).
func (l *Lease) Key() string { return l.key }

// ID returns the lease's id, for releasing it elsewhere with
// Limiter.Release (another goroutine, or another process sharing the
// store). It is opaque and short; it carries the store's lease id, the
// lease's cost and a digest of its key, so that a release with the wrong
// key is refused (ErrLeaseKey). It changes when Renew succeeds. It is not
// a secret: do not accept ids from untrusted clients as proof of anything.
func (l *Lease) ID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return formatLeaseID(l.id, l.cost, l.key)
}

// Expires returns when the lease expires unless released or renewed, by
// the limiter's clock: the Window after its grant (or renewal), to the
// millisecond; later, never earlier, only on a key granting more than 1,000
// leases in one millisecond. Renew moves it.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Release gives the lease back. It returns nil, ErrLeaseNotHeld when the
// lease had expired (nothing changes: its slots were already free), or
// ErrLeaseReleased when it was released before. Any other error is the
// store's (Redis down): the lease is then still held, until it expires or a
// later Release succeeds.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return ErrLeaseReleased
	}
	if l.id == 0 {
		l.released = true
		return nil
	}
	held, err := releaseLease(ctx, l.store, l.ruleNow(), l.key, l.cost, l.id, l.clock.Now())
	if err != nil {
		return err
	}
	l.released = true
	if !held {
		return fmt.Errorf("limiter: release of the lease on %s: %w", boundid.Quote(l.key), ErrLeaseNotHeld)
	}
	return nil
}

// Renew extends a held lease by the limit's Window from now, atomically:
// the lease's slots stay held throughout. It returns nil, or
// ErrLeaseNotHeld when the lease had expired (it is then released, and its
// slots may already be someone else's: stop the work or Acquire again), or
// ErrLeaseReleased. Any other error is the store's, and the lease is
// unchanged. Renew changes ID.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return ErrLeaseReleased
	}
	p := l.ruleNow()
	now := l.clock.Now()
	if l.id == 0 {
		l.expires = now.Truncate(time.Millisecond).Add(p.rule.Window)
		return nil
	}
	ls, err := leaseStore(l.store)
	if err != nil {
		return err
	}
	res, err := ls.Renew(ctx, leaseRequest(p, l.key, l.cost, now), l.id)
	if err != nil {
		return err
	}
	if !res.Allowed {
		l.released = true
		return fmt.Errorf("limiter: renewal of the lease on %s: %w", boundid.Quote(l.key), ErrLeaseNotHeld)
	}
	if res.Lease == 0 {
		return fmt.Errorf("limiter: the store renewed the lease on %s without a lease id; does %T implement backend.LeaseStore fully?",
			boundid.Quote(l.key), l.store)
	}
	l.id = res.Lease
	l.expires = now.Truncate(time.Millisecond).Add(p.rule.Window)
	return nil
}

// ruleNow returns the part to release or renew under: the concurrency rule
// in force when it counts under the prefix the lease was granted under
// (a live change of the limit or window keeps held leases), else the rule
// it was granted under.
func (l *Lease) ruleNow() part {
	c := l.src.leaseConfig()
	if c.lease >= 0 {
		if p := c.all[c.lease]; p.prefix == l.granted.prefix {
			return p
		}
	}
	return l.granted
}

// leaseStore returns store as a backend.LeaseStore, or an error saying it
// holds no leases.
func leaseStore(store backend.Store) (backend.LeaseStore, error) {
	if ls, ok := store.(backend.LeaseStore); ok {
		return ls, nil
	}
	return nil, invalidf(ErrInvalidConfig,
		"store %T holds no leases (it implements no backend.LeaseStore); use a store of this module, or forward Release and Renew in your wrapper", store)
}

// leaseRequest is the request that names a lease of cost on key under p at
// now. A limit lowered below the lease's cost must still let it go, so the
// limit is at least the cost.
func leaseRequest(p part, key string, cost int64, now time.Time) backend.Request {
	keys := [1]string{key}
	p.key = 0
	req := p.request(keys[:], cost, now)
	req.Rule.Limit = max(req.Rule.Limit, cost)
	return req
}

// releaseLease releases the lease id of cost on key under p.
func releaseLease(ctx context.Context, store backend.Store, p part, key string, cost, id int64, now time.Time) (bool, error) {
	ls, err := leaseStore(store)
	if err != nil {
		return false, err
	}
	return ls.Release(ctx, leaseRequest(p, key, cost, now), id)
}

// giveBack releases a lease a request took and then lost (a guard on a
// store of its own denied it). It runs even when ctx has ended; a failure
// leaves the lease to expire.
func giveBack(ctx context.Context, store backend.Store, req backend.Request, id int64) {
	ls, ok := store.(backend.LeaseStore)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	_, _ = ls.Release(ctx, req, id)
}

// giveBackTimeout bounds giveBack's call.
const giveBackTimeout = time.Second

// acquire decides a lease request under c and wraps an admission in a
// Lease. It is the entrance check of every Acquire and of Admit under a
// concurrency limit.
func acquire(ctx context.Context, src leaseSource, store backend.Store, clk clock.Clock, c *compiled, keys []string, n int64, now time.Time) (*Lease, Decision, error) {
	if _, err := leaseStore(store); err != nil {
		return nil, Decision{}, err
	}
	if err := c.checkRequest(keys, n); err != nil {
		return nil, Decision{}, err
	}
	d, err := c.decide(ctx, store, keys, n, now)
	if err != nil || !d.Allowed {
		return nil, d, err
	}
	p := c.all[c.lease]
	return newLease(src, store, clk, keys[p.key], n, p, d.Lease, now), d, nil
}

// releaseByID releases by id under c. It is the entrance check of a release
// by id: the key, and the id, which says the cost.
func releaseByID(ctx context.Context, store backend.Store, now time.Time, c *compiled, key, leaseID string) error {
	if key == "" {
		return errEmptyKey
	}
	id, cost, digest, err := parseLeaseID(leaseID)
	if err != nil {
		return err
	}
	if digest != keyDigest(key) {
		return fmt.Errorf("limiter: release of lease %s on %s: %w", leaseID, boundid.Quote(key), ErrLeaseKey)
	}
	if id == 0 {
		return nil // a lease that holds nothing
	}
	if c.lease < 0 {
		return noConcurrency(c)
	}
	held, err := releaseLease(ctx, store, c.all[c.lease], key, cost, id, now)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("limiter: release of lease %s on %s: %w", leaseID, boundid.Quote(key), ErrLeaseNotHeld)
	}
	return nil
}

// A lease id is "L1.<id>.<cost>.<key digest>": the store's lease id
// (negative for a fallback store's local lease) and the cost in decimal, and
// the FNV-1a digest of the key in 8 hex digits.
const (
	leaseIDPrefix = "L1."
	maxLeaseID    = 64 // far above the longest id formatLeaseID writes (about 54 bytes)
)

func formatLeaseID(id, cost int64, key string) string {
	b := make([]byte, 0, 48)
	b = append(b, leaseIDPrefix...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, cost, 10)
	b = append(b, '.')
	return string(fmt.Appendf(b, "%08x", keyDigest(key)))
}

func keyDigest(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()
}

// parseLeaseID reads an id written by formatLeaseID. Its errors wrap
// ErrInvalidRequest and quote at most maxLeaseID bytes of it.
func parseLeaseID(s string) (id, cost int64, digest uint32, err error) {
	if len(s) > maxLeaseID {
		return 0, 0, 0, invalidf(ErrInvalidRequest,
			"lease id is %d bytes, longer than any Lease.ID (at most %d); pass Lease.ID() unchanged", len(s), maxLeaseID)
	}
	bad := func() (int64, int64, uint32, error) {
		return 0, 0, 0, invalidf(ErrInvalidRequest, "lease id %s is not a Lease.ID; pass Lease.ID() unchanged", boundid.Quote(s))
	}
	rest, ok := strings.CutPrefix(s, leaseIDPrefix)
	if !ok {
		return bad()
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || len(parts[2]) != 8 {
		return bad()
	}
	if id, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
		return bad()
	}
	if cost, err = strconv.ParseInt(parts[1], 10, 64); err != nil || cost < 1 {
		return bad()
	}
	d, err := strconv.ParseUint(parts[2], 16, 32)
	if err != nil {
		return bad()
	}
	return id, cost, uint32(d), nil
}

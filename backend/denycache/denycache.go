// Package denycache answers repeated denials in process, without asking the
// store, while the store's answer is already known.
//
// A denial of one unit with nothing left is a fact about the key until its
// RetryAfter has passed: no request of any cost can be admitted on that key
// before then, by this process or any other, unless the key is reset or units
// are given back (a refund) or the limit changes. So a [Store] remembers such
// denials and answers the same key's one-unit requests itself until then,
// with exactly the Result the store would give (Allowed false, Remaining 0,
// the same RetryAfter and ResetAfter, counted from the request's own time)
// and Cached set. Everything else goes to the store: admissions, requests of
// more than one unit, Peek, TakeAll, and any request carrying an earlier
// time than the denial it would be answered from.
//
// Entries are invalidated at once by this process's Reset and TakeAll, and
// by a Take the store denied after giving its units back (a replica-ack
// refund: Result.Unconfirmed), and in other processes through a [Bus] (Redis pub/sub: goredisstore.NewBus,
// rueidisstore.NewBus). A message normally reaches every process within the
// pub/sub delivery time. The cache also sends itself a probe every
// ProbeInterval; while its subscription is not confirmed by a probe it holds
// nothing and answers nothing, so a subscription that silently broke costs
// at most two probe intervals of stale denials (and never an admission: a
// stale entry can only deny).
//
// Denials of concurrency leases (algorithms.Concurrency) are never cached:
// their RetryAfter says when held leases expire if none is released, but
// any process's Release frees a slot before that, and releases are as
// frequent as admissions. Invalidating on every release, here and over the
// bus, would cost a publish per lease to save a store call per denial, and
// a cached denial outliving a release would deny a request that the store
// admits. So a concurrency request always asks the store, and Release and
// Renew are forwarded to it (the Store is a backend.LeaseStore).
//
// Entries are keyed by a seeded 128-bit hash of the key and algorithm, so
// memory does not grow with the id's length, and are bounded by MaxEntries:
// a flood of denied keys evicts entries, which costs store calls, not memory.
package denycache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Bus carries invalidations between the processes that share a store.
// goredisstore.NewBus and rueidisstore.NewBus implement it over Redis
// pub/sub.
type Bus interface {
	// Publish sends msg to every listener of channel, this process's too.
	Publish(ctx context.Context, channel, msg string) error
	// Listen calls fn with every message published to channel until ctx
	// ends or the subscription fails; it returns why it stopped.
	Listen(ctx context.Context, channel string, fn func(msg string)) error
}

// DefaultChannel is the pub/sub channel invalidations travel on.
const DefaultChannel = "limitkit:denycache"

// Defaults of the options.
const (
	DefaultMaxEntries    = 100_000
	DefaultProbeInterval = 5 * time.Second
)

// shards splits the table so concurrent callers rarely share a lock.
const shards = 64

// Option configures a Store.
type Option func(*options)

type options struct {
	maxEntries int
	probe      time.Duration
	channel    string
	logger     *slog.Logger
}

// WithMaxEntries bounds the number of remembered denials (default
// DefaultMaxEntries).
func WithMaxEntries(n int) Option { return func(o *options) { o.maxEntries = n } }

// WithProbeInterval sets how often the cache checks that its subscription
// still delivers (default DefaultProbeInterval). A silently broken
// subscription is noticed within two intervals.
func WithProbeInterval(d time.Duration) Option { return func(o *options) { o.probe = d } }

// WithChannel sets the pub/sub channel (default DefaultChannel). Every
// process sharing a store must use the same one.
func WithChannel(name string) Option { return func(o *options) { o.channel = name } }

// WithLogger sets where subscription problems are logged (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Stats counts what a Store did.
type Stats struct {
	// Hits are denials answered from the cache.
	Hits uint64
	// Stored are denials remembered.
	Stored uint64
	// Invalidations are entries dropped by a reset, a TakeAll or a message.
	Invalidations uint64
	// Entries is the number of remembered denials now.
	Entries int
	// Listening reports whether the subscription is confirmed, that is
	// whether the cache is answering.
	Listening bool
}

// Store is a backend.Store that answers repeated denials from memory. It is
// safe for concurrent use. Close stops its subscription.
type Store struct {
	inner   backend.Store
	bus     Bus
	opts    options
	seed    maphash.Seed
	shards  [shards]shard
	perShrd int

	// listening is set while the subscription is confirmed.
	listening atomic.Bool
	hits      atomic.Uint64
	stored    atomic.Uint64
	dropped   atomic.Uint64
	// probes receives the probe nonces heard, this process's and others'.
	probes chan string
	cancel context.CancelFunc
	done   chan struct{}
}

type shard struct {
	mu sync.Mutex
	m  map[[2]uint64]entry
	// gen counts invalidations, so that a denial read from the store
	// before an invalidation arrived is not remembered after it.
	gen uint64
}

// entry is one remembered denial, times in ms since the Unix epoch.
type entry struct {
	algorithm algorithms.Name
	limit     int64
	window    time.Duration
	at        int64 // the time of the denial
	retryAt   int64 // when one unit is first admitted
	resetAt   int64 // when the key is back to its full allowance
}

var (
	_ backend.LeaseStore = (*Store)(nil)
	_ backend.Wrapper    = (*Store)(nil)
)

// cacheLeases lets a test cache concurrency denials, to show that doing so
// would be wrong. Always false outside tests.
var cacheLeases = false

// New returns a Store over inner. bus carries invalidations to the other
// processes sharing inner's state; it may be nil only when no other process
// shares it (then the cache answers as soon as it is made). Call Close when
// done.
func New(inner backend.Store, bus Bus, opts ...Option) (*Store, error) {
	o := options{maxEntries: DefaultMaxEntries, probe: DefaultProbeInterval, channel: DefaultChannel, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case inner == nil:
		return nil, errors.New("denycache: store is nil; pass the store to cache denials of")
	case o.maxEntries < shards:
		return nil, fmt.Errorf("denycache: max entries %d is below %d; raise it", o.maxEntries, shards)
	case o.probe < time.Millisecond:
		return nil, fmt.Errorf("denycache: probe interval %v is below 1ms; raise it", o.probe)
	case o.channel == "":
		return nil, errors.New("denycache: channel is empty; name one (or leave the default)")
	}
	s := &Store{inner: inner, bus: bus, opts: o, seed: maphash.MakeSeed(), perShrd: o.maxEntries / shards, done: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].m = make(map[[2]uint64]entry)
	}
	s.probes = make(chan string, 16)
	if bus == nil {
		s.listening.Store(true)
		close(s.done)
		s.cancel = func() {}
		return s, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.listen(ctx)
	return s, nil
}

// Close stops the subscription; the Store then answers nothing from memory.
// It does not close the inner store.
func (s *Store) Close() error {
	s.cancel()
	<-s.done
	if s.bus != nil {
		s.listening.Store(false)
		s.flush()
	}
	return nil
}

// Ready waits until the cache answers, that is until its subscription has
// been confirmed, or ctx ends. A Store answers every request correctly
// before that, through the inner store.
func (s *Store) Ready(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !s.listening.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("denycache: the subscription was not confirmed: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return Stats{Hits: s.hits.Load(), Stored: s.stored.Load(), Invalidations: s.dropped.Load(),
		Entries: n, Listening: s.listening.Load()}
}

// Take answers a one-unit request from a remembered denial when one holds,
// and otherwise asks the inner store, remembering a one-unit denial with
// nothing left.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if !cacheLeases && req.Rule.HoldsLeases() {
		return s.inner.Take(ctx, req) // see the package doc
	}
	if req.Cost != 1 || !s.listening.Load() {
		res, err := s.inner.Take(ctx, req)
		if err == nil && res.Allowed {
			h := s.hash(req.Key, req.Rule.Algorithm)
			s.forget(&s.shards[h[0]%shards], h)
		}
		if refunded(res, err) {
			s.announceRefund(ctx, req.Key, req.Rule.Algorithm)
		}
		return res, err
	}
	h := s.hash(req.Key, req.Rule.Algorithm)
	sh := &s.shards[h[0]%shards]
	now := req.Millis()
	sh.mu.Lock()
	e, ok := sh.m[h]
	gen := sh.gen
	sh.mu.Unlock()
	if ok && e.algorithm == req.Rule.Algorithm && e.limit == req.Rule.Limit && e.window == req.Rule.Window &&
		now >= e.at && now < e.retryAt {
		s.hits.Add(1)
		return backend.Result{
			Limit:      e.limit,
			RetryAfter: time.Duration(e.retryAt-now) * time.Millisecond,
			ResetAfter: time.Duration(max(e.resetAt-now, 0)) * time.Millisecond,
			Cached:     true,
		}, nil
	}
	// Validate before remembering anything: a bad request is the store's
	// to refuse.
	if err := req.Validate(); err != nil {
		return s.inner.Take(ctx, req)
	}
	res, err := s.inner.Take(ctx, req)
	if err == nil && res.Allowed {
		// An admission stamped after a remembered denial moves the key
		// on: a request stamped before it must ask the store.
		if ok {
			s.forget(sh, h)
		}
		return res, nil
	}
	if refunded(res, err) {
		s.announceRefund(ctx, req.Key, req.Rule.Algorithm)
		return res, nil
	}
	if err != nil || res.Remaining != 0 || res.Degraded || res.RetryAfter <= 0 {
		return res, err
	}
	s.remember(sh, h, gen, entry{
		algorithm: req.Rule.Algorithm, limit: req.Rule.Limit, window: req.Rule.Window,
		at: now, retryAt: now + res.RetryAfter.Milliseconds(), resetAt: now + res.ResetAfter.Milliseconds(),
	})
	return res, nil
}

// refunded reports a denial of units the store took and gave back: an
// admission too few replicas acknowledged (WithReplicaAck with
// backend.DenyUnconfirmed). While they were taken, any process could have
// been denied and cached it; the refund ends that denial.
func refunded(res backend.Result, err error) bool {
	return err == nil && !res.Allowed && res.Unconfirmed
}

// announceRefund drops key's entry here and tells the other processes that
// units came back. A failure to tell them is logged: the decision itself
// stands.
func (s *Store) announceRefund(ctx context.Context, key backend.Key, alg algorithms.Name) {
	s.invalidate(key, alg)
	if err := s.announce(ctx, key, alg); err != nil {
		s.opts.logger.Warn("limitkit: deny cache could not tell other processes of a refund", "err", err)
	}
}

// remember stores e unless an invalidation reached the shard since gen was
// read (it may concern this key) or the subscription dropped meanwhile. A
// full shard first loses an entry.
func (s *Store) remember(sh *shard, h [2]uint64, gen uint64, e entry) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen || !s.listening.Load() {
		return
	}
	if _, ok := sh.m[h]; !ok && len(sh.m) >= s.perShrd {
		for k := range sh.m { // map order is random: a random victim
			delete(sh.m, k)
			break
		}
	}
	sh.m[h] = e
	s.stored.Add(1)
}

// Release forwards to the inner store; it needs no invalidation, since
// concurrency denials are never cached.
func (s *Store) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	ls, err := leasesOf(s.inner)
	if err != nil {
		return false, err
	}
	return ls.Release(ctx, req, lease)
}

// Renew forwards to the inner store.
func (s *Store) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	ls, err := leasesOf(s.inner)
	if err != nil {
		return backend.Result{}, err
	}
	return ls.Renew(ctx, req, lease)
}

func leasesOf(st backend.Store) (backend.LeaseStore, error) {
	if ls, ok := backend.As[backend.LeaseStore](st); ok {
		return ls, nil
	}
	return nil, fmt.Errorf("denycache: the inner store %T holds no leases (it implements no backend.LeaseStore)", st)
}

// Unwrap returns the inner store (backend.Wrapper), so that what it can do
// (a breaker per cluster node, direct-context calls) is found through the
// cache with backend.As.
func (s *Store) Unwrap() backend.Store { return s.inner }

// Peek asks the inner store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.inner.Peek(ctx, req)
}

// Reset resets the key in the inner store, then drops its entry here and
// tells the other processes. The key is reset even when telling them fails;
// the error then says so.
func (s *Store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule) error {
	err := s.inner.Reset(ctx, key, rule)
	s.invalidate(key, rule.Algorithm)
	if err != nil {
		return err
	}
	return s.announce(ctx, key, rule.Algorithm)
}

// TakeAll asks the inner store, then drops the entries of its keys. When
// the call was denied or unconfirmed, a store may have given units back
// (a refund), so the other processes are told too.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	res, err := s.inner.TakeAll(ctx, reqs)
	for _, r := range reqs {
		s.invalidate(r.Key, r.Rule.Algorithm)
	}
	if err == nil && res.Allowed && !res.Unconfirmed {
		return res, nil
	}
	for _, r := range reqs {
		if r.Validate() != nil {
			continue
		}
		if aerr := s.announce(ctx, r.Key, r.Rule.Algorithm); aerr != nil && err == nil {
			s.opts.logger.Warn("limitkit: deny cache could not tell other processes of a possible refund", "err", aerr)
		}
	}
	return res, err
}

func (s *Store) invalidate(key backend.Key, alg algorithms.Name) {
	h := s.hash(key, alg)
	sh := &s.shards[h[0]%shards]
	sh.mu.Lock()
	sh.gen++
	if _, ok := sh.m[h]; ok {
		delete(sh.m, h)
		s.dropped.Add(1)
	}
	sh.mu.Unlock()
}

// forget drops the entry h after this process saw an admission on its key.
// Unlike invalidate it leaves the shard's generation alone: an admission is
// not news from elsewhere, and bumping the generation on every admission
// would keep concurrent denials in the shard from being remembered.
func (s *Store) forget(sh *shard, h [2]uint64) {
	sh.mu.Lock()
	if _, ok := sh.m[h]; ok {
		delete(sh.m, h)
		s.dropped.Add(1)
	}
	sh.mu.Unlock()
}

// announce publishes an invalidation of key under alg. The message is the
// algorithm, prefix and id joined by NUL bytes.
func (s *Store) announce(ctx context.Context, key backend.Key, alg algorithms.Name) error {
	if s.bus == nil {
		return nil
	}
	msg := "k\x00" + string(alg) + "\x00" + key.Prefix + "\x00" + key.ID
	if err := s.bus.Publish(context.WithoutCancel(ctx), s.opts.channel, msg); err != nil {
		return fmt.Errorf("denycache: other processes' caches were not told of the key's reset or refund (they may deny it until its retry time): %w", err)
	}
	return nil
}

// hash identifies a key's state: two seeded 64-bit hashes.
func (s *Store) hash(key backend.Key, alg algorithms.Name) [2]uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	_, _ = h.WriteString(string(alg))
	_ = h.WriteByte(0)
	_, _ = h.WriteString(key.Prefix)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(key.ID)
	a := h.Sum64()
	_ = h.WriteByte(1)
	return [2]uint64{a, h.Sum64()}
}

// flush drops every entry.
func (s *Store) flush() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.gen++
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// handle applies one message from the bus.
func (s *Store) handle(msg string) {
	if nonce, ok := strings.CutPrefix(msg, "p\x00"); ok {
		select {
		case s.probes <- nonce:
		default: // the probe loop is behind; it will send another
		}
		return
	}
	rest, ok := strings.CutPrefix(msg, "k\x00")
	if !ok {
		return
	}
	alg, rest, ok1 := strings.Cut(rest, "\x00")
	prefix, id, ok2 := strings.Cut(rest, "\x00")
	if !ok1 || !ok2 {
		return
	}
	s.invalidate(backend.Key{Prefix: prefix, ID: id}, algorithms.Name(alg))
}

// listen keeps the subscription up. The cache answers only while a probe
// it sent has come back since the last probe interval began.
func (s *Store) listen(ctx context.Context) {
	defer close(s.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		subCtx, stop := context.WithCancel(ctx)
		failed := make(chan error, 1)
		go func() { failed <- s.bus.Listen(subCtx, s.opts.channel, s.handle) }()
		ok := s.probeLoop(subCtx, failed)
		stop()
		s.listening.Store(false)
		s.flush()
		if ok {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// probeLoop sends a probe every interval while the subscription lasts. The
// cache answers from when a probe comes back until one does not within an
// interval. It returns whether the subscription was ever confirmed.
func (s *Store) probeLoop(ctx context.Context, failed <-chan error) bool {
	confirmed := false
	// Until a probe has come back the subscription may not be in place
	// yet: probe again soon, backing off to the interval.
	interval := min(10*time.Millisecond, s.opts.probe)
	for {
		nonce := newNonce()
		sent := time.Now()
		if err := s.bus.Publish(ctx, s.opts.channel, "p\x00"+nonce); err != nil && ctx.Err() == nil {
			s.opts.logger.Warn("limitkit: deny cache probe failed; not answering from memory", "err", err)
		}
		timeout := time.NewTimer(interval)
		heard := false
	wait:
		for {
			select {
			case <-ctx.Done():
				timeout.Stop()
				return confirmed
			case err := <-failed:
				timeout.Stop()
				if ctx.Err() == nil {
					s.opts.logger.Warn("limitkit: deny cache subscription ended; not answering from memory", "err", err)
				}
				return confirmed
			case got := <-s.probes:
				if got == nonce {
					heard = true
					break wait
				}
			case <-timeout.C:
				break wait
			}
		}
		timeout.Stop()
		if heard {
			confirmed = true
			interval = s.opts.probe
			if !s.listening.Load() {
				s.flush()
				s.listening.Store(true)
			}
		} else {
			// The probe did not come back: messages may have been lost.
			s.listening.Store(false)
			s.flush()
			if !confirmed {
				interval = min(2*interval, s.opts.probe)
			}
		}
		select {
		case <-ctx.Done():
			return confirmed
		case err := <-failed:
			if ctx.Err() == nil {
				s.opts.logger.Warn("limitkit: deny cache subscription ended; not answering from memory", "err", err)
			}
			return confirmed
		case <-time.After(max(interval-time.Since(sent), 0)):
		}
	}
}

func newNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

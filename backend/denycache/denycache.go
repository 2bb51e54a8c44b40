// Package denycache answers repeated denials in process, without asking the
// store, while the store's answer is already known.
//
// A denial of one unit with nothing left is a fact about the key until its
// RetryAfter has passed: no request of any cost can be admitted on that key
// before then, by this process or any other, unless something gives the key
// room early. So a [Store] remembers such denials and answers the same key's
// one-unit requests itself until then, with exactly the Result the store
// would give (Allowed false, Remaining 0, the same RetryAfter and
// ResetAfter, counted from the request's own time) and Cached set.
// Everything else goes to the store: admissions, requests of more than one
// unit, Peek, TakeAll, and any request carrying an earlier time than the
// denial it would be answered from.
//
// # What gives a key room early, and how the cache hears of it
//
//   - A reset, and units given back (a replica-ack refund, Result.Unconfirmed,
//     or a TakeAll that was denied or unconfirmed). This process drops the
//     entry at once and tells the others on the [Bus].
//   - A write under another rule on the same prefix and algorithm, as in a
//     rolling reload or after SetConfig: a 60 s window rolls a fixed window
//     shared with a 90 s one early, a lower limit may trim a log. Every
//     process announces on the Bus, at its first write under a rule and
//     then every ProbeInterval, which rule it writes under on which prefix;
//     a denial is cached only while its rule is the only one announced on
//     its prefix in the last three probe intervals, and a rule appearing
//     there ends every entry of the prefix.
//   - A write by a process whose clock runs ahead: stamped after a denial's
//     retry time, it rolls the window or slides the log early. The same
//     announcements carry how late each process stamps its requests, and an
//     entry answers only while no other process's clock, so announced and
//     advanced since, has reached its retry time.
//
// This process's own writes need no message: any Take it sends to the
// store replaces or drops the key's entry.
//
// Messages are sent off the request path, in order, by one goroutine: a
// call never waits on the bus (a stalled Redis costs the call only what the
// inner store's own deadline allows). So a message may reach the others
// just after the write it announces, and when the queue of DefaultOutbox
// messages is full a message is dropped and counted (Stats.Dropped): a
// dropped invalidation leaves the others' entries to their retry time, a
// dropped rule is announced again within a ProbeInterval.
//
// So a cached denial is the store's answer, under two conditions: every
// process writing the keys runs a deny cache on the same channel (a process
// without one announces nothing), and a message takes its delivery time:
// for that long after an event in another process a stale entry can deny
// what the store would admit (never the other way).
//
// The cache also sends itself a probe every ProbeInterval; while its
// subscription is not confirmed by a probe it holds nothing and answers
// nothing, so a subscription that silently broke costs at most two probe
// intervals of stale denials. A reconnect empties the cache.
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
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/option"
)

// Defaults of the options.
const (
	DefaultMaxEntries    = 100_000
	DefaultProbeInterval = 5 * time.Second
	// DefaultOutbox is how many messages wait to be sent at most.
	DefaultOutbox = 4096
)

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults New gives.
type options struct {
	maxEntries int
	probe      time.Duration
	channel    string
	logger     *slog.Logger
}

// WithMaxEntries bounds the number of remembered denials (default
// DefaultMaxEntries). It must be at least 64 (one per shard of the cache).
func WithMaxEntries(n int) Option {
	return func(o *options) error {
		if n < shards {
			return fmt.Errorf("WithMaxEntries: the maximum is %d, below %d (one per shard); raise it", n, shards)
		}
		o.maxEntries = n
		return nil
	}
}

// WithProbeInterval sets how often the cache checks that its subscription
// still delivers and renews its announcements of the rules it writes under
// (default DefaultProbeInterval). A silently broken subscription is noticed
// within two intervals; a rule stops counting three intervals after its
// last write. It must be at least 1ms.
func WithProbeInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("WithProbeInterval: the interval is %v, below 1ms; raise it", d)
		}
		o.probe = d
		return nil
	}
}

// WithChannel sets the pub/sub channel (default DefaultChannel). Every
// process sharing a store must use the same one. It must not be empty.
func WithChannel(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("WithChannel: the channel is empty; name one, or leave the option out for DefaultChannel")
		}
		o.channel = name
		return nil
	}
}

// WithLogger sets where subscription problems are logged (default
// slog.Default()). A nil logger is refused.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("WithLogger: the logger is nil; pass a *slog.Logger, or leave the option out for slog.Default()")
		}
		o.logger = l
		return nil
	}
}

// Stats counts what a Store did.
type Stats struct {
	// Hits are denials answered from the cache.
	Hits uint64
	// Stored are denials remembered.
	Stored uint64
	// Invalidations are entries dropped by a reset, a TakeAll, a write or a
	// message.
	Invalidations uint64
	// Entries is the number of remembered denials now.
	Entries int
	// Listening reports whether the subscription is confirmed, that is
	// whether the cache is answering. When it is false, Entries is 0.
	Listening bool
	// Dropped are messages not sent because DefaultOutbox were waiting;
	// Unsent those the bus failed to send.
	Dropped, Unsent uint64
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

	// id names this process in its announcements.
	id string
	// mine holds this process's writes per rule and prefix (ruleKey ->
	// *ownUse); groups what is known of each prefix (sightings.go).
	mine    sync.Map
	sightMu sync.Mutex
	groups  map[groupID]*group
	renewed atomic.Int64 // mono ms of the last renewal
	// born is the origin of mono.
	born time.Time

	// listening is set while the subscription is confirmed. stateMu
	// makes its clearing and the flush one step for Stats.
	listening atomic.Bool
	stateMu   sync.Mutex
	// outbox holds the messages to send; sender sends them.
	outbox         chan string
	sender         sync.WaitGroup
	pubDropped     atomic.Uint64
	pubFailed      atomic.Uint64
	lastPubWarning atomic.Int64 // mono ms
	hits           atomic.Uint64
	stored         atomic.Uint64
	dropped        atomic.Uint64
	// probes receives the probe nonces heard, this process's and others'.
	probes chan string
	cancel context.CancelFunc
	done   chan struct{}
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
	if inner == nil {
		return nil, errors.New("denycache: store is nil; pass the store to cache denials of")
	}
	o := options{maxEntries: DefaultMaxEntries, probe: DefaultProbeInterval, channel: DefaultChannel, logger: slog.Default()}
	if err := option.Apply(&o, opts); err != nil {
		return nil, fmt.Errorf("denycache: %w", err)
	}
	s := &Store{inner: inner, bus: bus, opts: o, seed: maphash.MakeSeed(), perShrd: o.maxEntries / shards,
		id: newNonce(), born: time.Now(), groups: make(map[groupID]*group), done: make(chan struct{})}
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
	s.outbox = make(chan string, DefaultOutbox)
	s.sender.Go(func() { s.send(ctx) })
	go s.listen(ctx)
	return s, nil
}

// Close stops the subscription; the Store then answers nothing from memory.
// It does not close the inner store.
func (s *Store) Close() error {
	s.cancel()
	<-s.done
	s.sender.Wait()
	if s.bus != nil {
		s.stopAnswering()
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
	if !unlockedStats {
		s.stateMu.Lock()
		defer s.stateMu.Unlock()
	}
	return Stats{Hits: s.hits.Load(), Stored: s.stored.Load(), Invalidations: s.dropped.Load(),
		Entries: s.entries(), Listening: s.listening.Load(), Dropped: s.pubDropped.Load(), Unsent: s.pubFailed.Load()}
}

// stopAnswering stops answering from memory and empties the cache, as one
// step for Stats. A Take storing concurrently checks listening under its
// shard's lock, so nothing is left behind.
func (s *Store) stopAnswering() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.listening.Store(false)
	if testBeforeFlush != nil {
		testBeforeFlush()
	}
	s.flush()
}

// Test hooks: testBeforeFlush runs between the clearing of listening and
// the flush; unlockedStats reads Stats without stateMu (the bug that let a
// reader see Listening false and an entry).
var (
	testBeforeFlush func()
	unlockedStats   bool
)

// Take answers a one-unit request (not a charge) from a remembered denial
// when one holds, and otherwise asks the inner store, remembering a
// one-unit denial with nothing left.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if !cacheLeases && req.Rule.HoldsLeases() {
		return s.inner.Take(ctx, req) // see the package doc
	}
	h := s.hash(req.Key, req.Rule.Algorithm)
	sh := &s.shards[h[0]%shards]
	now := req.Millis()
	// A charge (backend.Request.Charge) is never answered from memory: it
	// must reach the store to be recorded. Its answer is an admission, so
	// it is never remembered either; the denials after it are, correctly:
	// a charge only adds, so no denial it causes ends early.
	cacheable := req.Cost == 1 && !req.Charge && s.listening.Load()
	var gen uint64
	if cacheable {
		res, hit, g := s.lookup(sh, h, req.Rule, now)
		if hit {
			return res, nil
		}
		gen = g
	}
	grp, ggen := s.use(ctx, &req)
	res, err := s.inner.Take(ctx, req)
	if refunded(res, err) {
		s.announceRefund(req.Key, req.Rule.Algorithm)
		return res, nil
	}
	// The store trusts nothing it is given, but the cache must not keep an
	// answer for a request it could not have decided: validate once, here.
	if cacheable && err == nil && !res.Allowed && res.Remaining == 0 && !res.Degraded && res.RetryAfter > 0 &&
		req.Validate() == nil && s.remember(sh, h, gen, entry{
		algorithm: req.Rule.Algorithm, limit: req.Rule.Limit, window: req.Rule.Window,
		at: now, retryAt: now + res.RetryAfter.Milliseconds(), resetAt: now + res.ResetAfter.Milliseconds(),
		group: grp, ggen: ggen,
	}) {
		return res, nil
	}
	// Any other write moves the key on (an admission, or a request stamped
	// later that slid its log): what was remembered may no longer hold.
	s.forget(sh, h)
	return res, err
}

// refunded reports a denial of units the store took and gave back: an
// admission too few replicas acknowledged (WithReplicaAck with
// backend.DenyUnconfirmed). While they were taken, any process could have
// been denied and cached it; the refund ends that denial.
func refunded(res backend.Result, err error) bool {
	return err == nil && !res.Allowed && res.Unconfirmed
}

// announceRefund drops key's entry here and tells the other processes that
// units came back, off the request path.
func (s *Store) announceRefund(key backend.Key, alg algorithms.Name) {
	s.invalidate(key, alg)
	s.post(keyMessage(key, alg))
}

// GiveBack gives units back through the inner store (backend.UnitRefunder),
// then drops key's entry here and tells the other processes, as a refund:
// a denial remembered anywhere no longer holds. A store underneath that
// cannot give units back is an error.
func (s *Store) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	r, ok := backend.As[backend.UnitRefunder](s.inner)
	if !ok {
		return backend.Result{}, fmt.Errorf("denycache: the inner store %T cannot give units back (it implements no backend.UnitRefunder)", s.inner)
	}
	res, err := r.GiveBack(ctx, req)
	if err == nil {
		s.announceRefund(req.Key, req.Rule.Algorithm)
	}
	return res, err
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
func (s *Store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	err := s.inner.Reset(ctx, key, rule, now)
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
	res, _, err := s.takeAll(ctx, reqs, false)
	return res, err
}

// TakeEach implements backend.EachTaker: TakeAll, with the inner store's
// results for every request.
func (s *Store) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	return s.takeAll(ctx, reqs, true)
}

// takeAll is TakeAll, asking the inner store for each when wantEach.
func (s *Store) takeAll(ctx context.Context, reqs []backend.Request, wantEach bool) (backend.Result, []backend.Result, error) {
	for i := range reqs {
		if cacheLeases || !reqs[i].Rule.HoldsLeases() {
			s.use(ctx, &reqs[i])
		}
	}
	var res backend.Result
	var each []backend.Result
	var err error
	if wantEach {
		res, each, err = backend.TakeEach(ctx, s.inner, reqs)
	} else {
		res, err = s.inner.TakeAll(ctx, reqs)
	}
	for _, r := range reqs {
		s.invalidate(r.Key, r.Rule.Algorithm)
	}
	if err == nil && res.Allowed && !res.Unconfirmed {
		return res, each, nil
	}
	if errors.Is(err, algorithms.ErrInvalidRequest) || errors.Is(err, algorithms.ErrInvalidRule) {
		return res, each, err // refused before anything was taken: nothing to tell
	}
	for _, r := range reqs {
		s.post(keyMessage(r.Key, r.Rule.Algorithm))
	}
	return res, each, err
}

package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

// storeKind is the topology a backend URL names.
type storeKind uint8

const (
	memoryKind storeKind = iota
	singleKind
	clusterKind
	sentinelKind
)

// target is a backend URL read by the chosen client's parser.
type target struct {
	kind    storeKind
	maxKeys int // memory://?max_keys=N; 0 for the default

	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
	rueidis  rueidis.ClientOption
}

// client returns the Redis client library b names, GoRedis by default.
func (b *Backend) client() string {
	if b.Client == "" {
		return GoRedis
	}
	return b.Client
}

// target parses b.URL. Errors never repeat the URL's userinfo, however
// malformed the URL: parseURL checks it before any parser sees it, and the
// client parsers get the URL without it.
func (b *Backend) target() (target, error) {
	u, err := parseURL(b.URL)
	if err != nil {
		return target{}, err
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "memory":
		return memoryTarget(u)
	case "redis", "rediss":
		if u.Query().Has("addr") {
			return target{}, errors.New("a redis:// URL names one server; for several addresses use redis+cluster:// or redis+sentinel://")
		}
		return b.redisTarget(singleKind, u, scheme)
	case "redis+cluster", "rediss+cluster":
		return b.redisTarget(clusterKind, u, strings.TrimSuffix(scheme, "+cluster"))
	case "redis+sentinel", "rediss+sentinel":
		return b.redisTarget(sentinelKind, u, strings.TrimSuffix(scheme, "+sentinel"))
	case "":
		return target{}, errors.New("the URL has no scheme; write memory://, redis://host:port/db, rediss://, redis+cluster:// or redis+sentinel://")
	}
	return target{}, fmt.Errorf("unknown scheme %q%s; write memory://, redis://, rediss://, redis+cluster:// or redis+sentinel://",
		clip(u.Scheme, 24), didYouMean(scheme, schemes))
}

// schemes are the URL schemes target reads.
var schemes = []string{"memory", "redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

func memoryTarget(u *url.URL) (target, error) {
	t := target{kind: memoryKind}
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.Opaque != "" {
		return t, errors.New("memory:// takes no host or path; write memory:// or memory://?max_keys=N")
	}
	for k, vs := range u.Query() {
		if k != "max_keys" {
			return t, fmt.Errorf("memory:// has no option %q%s; its only option is max_keys", clip(k, 40), didYouMean(k, []string{"max_keys"}))
		}
		n, err := strconv.Atoi(vs[len(vs)-1])
		if err != nil || n < 1 {
			return t, fmt.Errorf("max_keys %q: write a whole number of at least 1", clip(vs[len(vs)-1], 24))
		}
		t.maxKeys = n
	}
	return t, nil
}

// rueidisOptions are the query options rueidis.ParseURL reads; it ignores
// others, which go-redis refuses, so a typo would pass silently.
var rueidisOptions = []string{"addr", "client_cache", "client_name", "db", "dial_timeout", "master_set", "max_retries",
	"protocol", "skip_verify", "write_timeout"}

// redisTarget parses u as scheme (redis or rediss) with the client's parser
// for the topology. The parser gets u without its userinfo, so that none of
// its errors can hold the password; the credentials are set afterwards,
// where the parser would have put them.
func (b *Backend) redisTarget(kind storeKind, u *url.URL, scheme string) (target, error) {
	t := target{kind: kind}
	if u.Opaque != "" {
		return t, fmt.Errorf("write %s://host:port, with \"//\" after the scheme", scheme)
	}
	user, password, v := credentials(u)
	v.Scheme = scheme
	q := v.Query()
	ts, err := takeTLSOptions(q)
	if err != nil {
		return t, err
	}
	if ts.set() && scheme != "rediss" {
		return t, fmt.Errorf("the tls_ options need TLS: write rediss://, rediss+cluster:// or rediss+sentinel:// (not %s)", clip(u.Scheme, 24))
	}
	if ts.set() {
		v.RawQuery = q.Encode()
	}
	if kind == sentinelKind {
		// go-redis calls the monitored master's name master_name, rueidis
		// master_set; accept either and hand each parser its own.
		q := v.Query()
		name := q.Get("master_name")
		if name == "" {
			name = q.Get("master_set")
		}
		if name == "" {
			return t, errors.New("a sentinel URL names the master: add ?master_name=NAME")
		}
		q.Del("master_name")
		q.Del("master_set")
		if b.client() == GoRedis {
			q.Set("master_name", name)
		} else {
			q.Set("master_set", name)
		}
		v.RawQuery = q.Encode()
	}
	raw := v.String()
	switch b.client() {
	case GoRedis:
		switch kind {
		case singleKind:
			if t.single, err = redis.ParseURL(raw); err == nil {
				o := t.single
				o.ContextTimeoutEnabled = true
				o.Username, o.Password = user, password
				if o.TLSConfig != nil {
					o.Dialer = tlsDialer(o.TLSConfig, o.DialTimeout)
				}
			}
		case clusterKind:
			if t.cluster, err = redis.ParseClusterURL(raw); err == nil {
				o := t.cluster
				o.ContextTimeoutEnabled = true
				o.Username, o.Password = user, password
				if o.TLSConfig != nil {
					o.Dialer = tlsDialer(o.TLSConfig, o.DialTimeout)
				}
			}
		case sentinelKind:
			if t.failover, err = redis.ParseFailoverURL(raw); err == nil {
				// go-redis reads a sentinel URL's userinfo as the
				// sentinels' credentials.
				o := t.failover
				o.ContextTimeoutEnabled = true
				o.SentinelUsername, o.SentinelPassword = user, password
				if o.TLSConfig != nil {
					o.Dialer = tlsDialer(o.TLSConfig, o.DialTimeout)
				}
			}
		}
	case Rueidis:
		for k := range v.Query() {
			if !slices.Contains(rueidisOptions, k) {
				return t, fmt.Errorf("rueidis has no URL option %q%s; its options are %s", clip(k, 40), didYouMean(k, rueidisOptions),
					strings.Join(rueidisOptions, ", "))
			}
		}
		if t.rueidis, err = rueidis.ParseURL(raw); err == nil {
			t.rueidis.Username, t.rueidis.Password = user, password
			if t.rueidis.TLSConfig != nil {
				t.rueidis.DialCtxFn = rueidisTLSDial
			}
		}
	}
	if err != nil {
		return t, fmt.Errorf("%s: %w", b.client(), scrubbed(err, secretsOf(b.URL, u)))
	}
	if ts.set() {
		if err := ts.apply(t.tlsConfig()); err != nil {
			return t, err
		}
	}
	return t, nil
}

// tlsConfig returns the TLS configuration the client parser made for a
// rediss URL (nil for redis://): the one its dialer gets for every node
// and, with go-redis, every sentinel.
func (t *target) tlsConfig() *tls.Config {
	switch {
	case t.single != nil:
		return t.single.TLSConfig
	case t.cluster != nil:
		return t.cluster.TLSConfig
	case t.failover != nil:
		return t.failover.TLSConfig
	}
	return t.rueidis.TLSConfig
}

// BuildOption configures Build.
type BuildOption func(*buildOptions)

type buildOptions struct {
	limiter  []limiter.Option
	fallback []fallback.Option
}

// WithLimiterOptions passes opts to every limiter Build makes, such as
// limiter.WithClock for a fake clock in tests.
func WithLimiterOptions(opts ...limiter.Option) BuildOption {
	return func(o *buildOptions) { o.limiter = append(o.limiter, opts...) }
}

// WithFallbackOptions passes opts to fallback.New after those the file
// sets, for what a file cannot say (a state hook, a logger). It has no
// effect without a fallback section.
func WithFallbackOptions(opts ...fallback.Option) BuildOption {
	return func(o *buildOptions) { o.fallback = append(o.fallback, opts...) }
}

// Set is the limiters a Config declares, sharing one store.
type Set struct {
	store    backend.Store
	fallback *fallback.Store
	backend  Backend
	group    *limiter.Group
	names    []string
	limiters map[string]*limiter.Limiter
	close    func() error
	once     sync.Once
	closeErr error
}

// Build validates c, opens its backend and makes one limiter per policy.
// With memory:// and go-redis it does not use the network; a rueidis
// client connects here, and Build fails when no server answers. ctx only
// cancels Build before it opens the backend. Close the Set to close the
// Redis client it made.
func (c *Config) Build(ctx context.Context, opts ...BuildOption) (*Set, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var o buildOptions
	for _, opt := range opts {
		opt(&o)
	}
	store, fb, closeFn, err := c.Backend.open(o.fallback)
	if err != nil {
		return nil, err
	}
	s := &Set{store: store, fallback: fb, backend: c.Backend, limiters: map[string]*limiter.Limiter{}, close: closeFn}
	// One group, so that Reload changes every policy in one step.
	s.group, err = limiter.NewGroup(store, c.limiterConfigs(), o.limiter...)
	if err != nil {
		_ = s.Close()
		return nil, c.fieldError("policies", err)
	}
	for i, lim := range s.group.Limiters() {
		name := c.Policies[i].Name
		s.names = append(s.names, name)
		s.limiters[name] = lim
	}
	return s, nil
}

// Open opens the store b names, with its fallback when it has one, for
// programs that build their limiters in code. Call closeFn when done with
// the store; it closes the Redis client Open made.
func (b Backend) Open(ctx context.Context) (store backend.Store, closeFn func() error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	c := Config{Backend: b}
	l := &errorList{}
	c.validateBackend(l)
	if err := l.err(); err != nil {
		return nil, nil, err
	}
	store, _, closeFn, err = b.open(nil)
	return store, closeFn, err
}

// open makes the store of a validated backend.
func (b *Backend) open(fbOpts []fallback.Option) (backend.Store, *fallback.Store, func() error, error) {
	t, err := b.target()
	if err != nil {
		return nil, nil, nil, &Error{Field: "backend.url", Err: err}
	}
	if t.kind == memoryKind {
		var mopts []memorystore.Option
		if t.maxKeys > 0 {
			mopts = append(mopts, memorystore.WithMaxKeys(t.maxKeys))
		}
		s, err := memorystore.New(mopts...)
		if err != nil {
			return nil, nil, nil, &Error{Field: "backend.url", Err: err}
		}
		return s, nil, func() error { return nil }, nil
	}
	store, closeFn, err := b.openRedis(t)
	if err != nil {
		return nil, nil, nil, err
	}
	if b.Fallback == nil {
		return store, nil, closeFn, nil
	}
	fb, err := fallback.New(store, slices.Concat(b.Fallback.options(), fbOpts)...)
	if err != nil {
		_ = closeFn()
		return nil, nil, nil, &Error{Field: "backend.fallback", Err: err}
	}
	return fb, fb, closeFn, nil
}

func (f *Fallback) options() []fallback.Option {
	var opts []fallback.Option
	if f.Timeout > 0 {
		opts = append(opts, fallback.WithTimeout(f.Timeout))
	}
	if f.FailureThreshold > 0 {
		opts = append(opts, fallback.WithFailureThreshold(f.FailureThreshold))
	}
	if f.OpenTimeout > 0 {
		opts = append(opts, fallback.WithOpenTimeout(f.OpenTimeout))
	}
	if f.Probes > 0 {
		opts = append(opts, fallback.WithProbes(f.Probes))
	}
	if f.OnFailure.Mode() != backend.ModeUnset {
		opts = append(opts, fallback.WithPolicy(f.OnFailure))
	}
	return opts
}

// storeOptions returns the store options the backend section asks for,
// made by a store package's constructors (both Redis stores have the same
// ones).
func storeOptions[O any](b *Backend, serverTime func() O, replicaAck func(int, time.Duration, backend.OnShortAck) O, batching func(int) O) []O {
	var opts []O
	if b.ServerTime {
		opts = append(opts, serverTime())
	}
	if a := b.ReplicaAck; a != nil {
		onShort := backend.DenyUnconfirmed
		if a.OnShort == "admit" {
			onShort = backend.AdmitUnconfirmed
		}
		opts = append(opts, replicaAck(a.Replicas, a.Timeout, onShort))
	}
	if b.Batch > 0 {
		opts = append(opts, batching(b.Batch))
	}
	return opts
}

// openRedis makes the client and the store over it.
func (b *Backend) openRedis(t target) (backend.Store, func() error, error) {
	if b.client() == Rueidis {
		return b.openRueidis(t)
	}
	c := newGoRedis(t)
	opts := storeOptions(b, goredisstore.WithServerTime, goredisstore.WithReplicaAck, goredisstore.WithBatching)
	s, err := goredisstore.New(c, opts...)
	if err != nil {
		_ = c.Close()
		return nil, nil, &Error{Field: "backend", Err: err}
	}
	return s, c.Close, nil
}

func (b *Backend) openRueidis(t target) (backend.Store, func() error, error) {
	c, err := rueidis.NewClient(t.rueidis)
	if err != nil {
		return nil, nil, fmt.Errorf("config: backend.url: rueidis could not connect: %w", err)
	}
	opts := storeOptions(b, rueidisstore.WithServerTime, rueidisstore.WithReplicaAck, rueidisstore.WithBatching)
	s, err := rueidisstore.New(c, opts...)
	if err != nil {
		c.Close()
		return nil, nil, &Error{Field: "backend", Err: err}
	}
	return s, func() error { c.Close(); return nil }, nil
}

// Limiter returns the limiter of the named policy, or nil when the file
// declares none by that name (see Lookup).
func (s *Set) Limiter(name string) *limiter.Limiter { return s.limiters[name] }

// Lookup returns the limiter of the named policy and whether there is one.
func (s *Set) Lookup(name string) (*limiter.Limiter, bool) {
	l, ok := s.limiters[name]
	return l, ok
}

// Names lists the policies in file order.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Store returns the store every limiter shares: the fallback store when
// the file has a fallback section.
func (s *Set) Store() backend.Store { return s.store }

// Fallback returns the fallback store, for its State and Stats; nil
// without a fallback section.
func (s *Set) Fallback() *fallback.Store { return s.fallback }

// Close closes the Redis client Build made. It is safe to call more than
// once; the limiters must not be used after it.
func (s *Set) Close() error {
	s.once.Do(func() {
		if s.close != nil {
			s.closeErr = s.close()
		}
	})
	return s.closeErr
}

// newGoRedis makes the go-redis client for a Redis target.
func newGoRedis(t target) redis.UniversalClient {
	switch t.kind {
	case clusterKind:
		return redis.NewClusterClient(t.cluster)
	case sentinelKind:
		return redis.NewFailoverClient(t.failover)
	}
	return redis.NewClient(t.single)
}

// GoRedisClient makes a go-redis client for a Redis URL in any of the
// forms Backend.URL takes (not memory://), for tools that need the client
// itself: a *redis.Client for redis://, rediss:// and redis+sentinel://, a
// *redis.ClusterClient for redis+cluster://. The caller closes it.
func GoRedisClient(rawURL string) (redis.UniversalClient, error) {
	b := Backend{URL: rawURL, Client: GoRedis}
	t, err := b.target()
	if err != nil {
		return nil, &Error{Field: "backend.url", Err: err}
	}
	if t.kind == memoryKind {
		return nil, &Error{Field: "backend.url", Err: errors.New("memory:// is not a Redis URL")}
	}
	return newGoRedis(t), nil
}

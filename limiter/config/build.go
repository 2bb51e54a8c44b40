package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/option"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/storestack"
)

// client returns the Redis client library b names, GoRedis by default.
func (b *Backend) client() string {
	if b.Client == "" {
		return GoRedis
	}
	return b.Client
}

// urlOptions are the storeurl options the backend section asks for.
func (b *Backend) urlOptions() []storeurl.Option {
	opts := []storeurl.Option{storeurl.WithClient(b.client())}
	if b.ServerTime {
		opts = append(opts, storeurl.WithServerTime())
	}
	if a := b.ReplicaAck; a != nil {
		onShort := backend.DenyUnconfirmed
		if a.OnShort == "admit" {
			onShort = backend.AdmitUnconfirmed
		}
		opts = append(opts, storeurl.WithReplicaAck(a.Replicas, a.Timeout, onShort))
	}
	if b.Batch > 0 {
		opts = append(opts, storeurl.WithBatching(b.Batch))
	}
	return opts
}

// kind reads b.URL without contacting a server (storeurl.Parse, which also
// reads the tls_ files).
func (b *Backend) kind() (storeurl.Kind, error) {
	k, err := storeurl.Parse(b.URL, storeurl.WithClient(b.client()))
	return k, urlError(err)
}

// urlError strips storeurl's prefix, which an *Error's field replaces.
func urlError(err error) error {
	var e *storeurl.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// Option configures Build. Options apply in order; a nil Option is
// ignored.
type Option func(*options) error

// options are what the Options set.
type options struct {
	limiter  []limiter.Option
	fallback []fallback.Option
}

// WithLimiterOptions passes opts to every limiter Build makes, such as
// limiter.WithClock for a fake clock in tests.
func WithLimiterOptions(opts ...limiter.Option) Option {
	return func(o *options) error { o.limiter = append(o.limiter, opts...); return nil }
}

// WithFallbackOptions passes opts to fallback.New after those the file
// sets, for what a file cannot say (a state hook, a logger). It has no
// effect without a fallback section.
func WithFallbackOptions(opts ...fallback.Option) Option {
	return func(o *options) error { o.fallback = append(o.fallback, opts...); return nil }
}

// Set is the limiters a Config declares, sharing one store.
type Set struct {
	store     backend.Store
	fallback  *fallback.Store
	denyCache *denycache.Store
	backend   Backend
	group     *limiter.Group
	names     []string
	limiters  map[string]*limiter.Limiter
	http      map[string]*HTTP // the policies' http blocks, as built
	close     func() error
	once      sync.Once
	closeErr  error
}

// Build validates c, opens its backend and makes one limiter per policy.
// Opening a Redis backend checks it within the URL's dial timeout (see
// storeurl.Open): a wrong password, a TLS mismatch, an unknown sentinel
// master or a server that does not answer fails Build with the reason,
// with both clients. ctx bounds the opening. Close the Set to close the
// Redis client it made.
func (c *Config) Build(ctx context.Context, opts ...Option) (*Set, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var o options
	if err := option.Apply(&o, opts); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	st, err := c.Backend.open(ctx, o.fallback)
	if err != nil {
		return nil, err
	}
	s := &Set{store: st.store, fallback: st.fallback, denyCache: st.denyCache, backend: c.Backend,
		limiters: map[string]*limiter.Limiter{}, http: map[string]*HTTP{}, close: st.close}
	// One group, so that Reload changes every policy in one step.
	s.group, err = limiter.NewGroup(st.store, c.limiterConfigs(), o.limiter...)
	if err != nil {
		_ = s.Close()
		return nil, c.fieldError("policies", err)
	}
	for i, lim := range s.group.Limiters() {
		name := c.Policies[i].Name
		s.names = append(s.names, name)
		s.limiters[name] = lim
		s.http[name] = c.Policies[i].HTTP
	}
	return s, nil
}

// Open opens the store b names, with its deny cache and fallback when it
// has them, for programs that build their limiters in code. Call closeFn
// when done with the store; it closes the deny cache and the Redis client
// Open made.
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
	st, err := b.open(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return st.store, st.close, nil
}

// stack is an opened backend: the store the limiters use, the wrappers in
// it, and how to close it.
type stack struct {
	store     backend.Store
	fallback  *fallback.Store
	denyCache *denycache.Store
	close     func() error
}

// open makes the store of a validated backend, stacked by storestack in
// the documented order, fallback(denycache(store)): the deny cache
// remembers only the store's own denials (a fallback's local or
// fail-closed denial during an outage is no fact about the key), and the
// fallback guards every call that reaches Redis.
func (b *Backend) open(ctx context.Context, fbOpts []fallback.Option) (*stack, error) {
	op, err := storeurl.Open(ctx, b.URL, b.urlOptions()...)
	if err != nil {
		return nil, &Error{Field: "backend.url", Err: urlError(err)}
	}
	var layers []storestack.Option
	if d := b.DenyCache; d != nil {
		layers = append(layers, storestack.WithDenyCache(op.Bus, d.options()...))
	}
	if b.Fallback != nil {
		layers = append(layers, storestack.WithFallback(slices.Concat(b.Fallback.options(), fbOpts)...))
	}
	built, err := storestack.New(op.Store, layers...)
	if err != nil {
		_ = op.Close()
		field := "backend.fallback"
		if se, ok := errors.AsType[*storestack.Error](err); ok {
			if se.Layer == storestack.LayerDenyCache {
				field = "backend.deny_cache"
			}
			err = se.Err
		}
		return nil, &Error{Field: field, Err: err}
	}
	return &stack{store: built.Store, fallback: built.Fallback, denyCache: built.DenyCache,
		close: func() error { return errors.Join(built.Close(), op.Close()) }}, nil
}

func (d *DenyCache) options() []denycache.Option {
	var opts []denycache.Option
	if d.MaxEntries > 0 {
		opts = append(opts, denycache.WithMaxEntries(d.MaxEntries))
	}
	if d.ProbeInterval > 0 {
		opts = append(opts, denycache.WithProbeInterval(d.ProbeInterval))
	}
	if d.Channel != "" {
		opts = append(opts, denycache.WithChannel(d.Channel))
	}
	return opts
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

// DenyCache returns the deny cache, for its Stats; nil without a
// deny_cache section.
func (s *Set) DenyCache() *denycache.Store { return s.denyCache }

// Close closes the deny cache and the Redis client Build made. It is safe to call more than
// once; the limiters must not be used after it.
func (s *Set) Close() error {
	s.once.Do(func() {
		if s.close != nil {
			s.closeErr = s.close()
		}
	})
	return s.closeErr
}

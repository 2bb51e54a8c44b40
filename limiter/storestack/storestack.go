// Package storestack puts a store's wrappers around it in the one
// documented order (docs/stores.md, "Stacking wrappers"):
// observe(fallback(denycache(store))). The deny cache sits on the store so
// that it remembers only the store's own denials, never a fallback's; the
// fallback store guards every call that reaches the store, the deny cache
// included; the observer goes outermost so that it sees degraded and
// cached decisions alike. limiter/config and limitkit-rls build their
// stacks with it, and the wrapper conformance suite
// (internal/dev/wrappertest) runs what it builds.
package storestack

import (
	"errors"
	"fmt"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/option"
)

// Option adds a wrapper to the stack New builds. Options apply in order
// (a later one of the same wrapper replaces an earlier); a nil Option is
// ignored. The order of the wrappers is New's, whatever the options'.
type Option func(*options) error

// options are the wrappers the Options ask for.
type options struct {
	deny     bool
	bus      denycache.Bus
	denyOpts []denycache.Option
	fb       bool
	fbOpts   []fallback.Option
	obs      *observe.Observer
}

// WithDenyCache puts a deny cache (denycache.New with bus and opts) on the
// store.
func WithDenyCache(bus denycache.Bus, opts ...denycache.Option) Option {
	return func(o *options) error {
		o.deny, o.bus, o.denyOpts = true, bus, opts
		return nil
	}
}

// WithFallback puts a fallback store (fallback.New with opts) around the
// store and its deny cache.
func WithFallback(opts ...fallback.Option) Option {
	return func(o *options) error {
		o.fb, o.fbOpts = true, opts
		return nil
	}
}

// WithObserver puts an observer (observe.Wrap) outermost.
func WithObserver(obs observe.Observer) Option {
	return func(o *options) error {
		o.obs = &obs
		return nil
	}
}

// Stack is a store with its wrappers.
type Stack struct {
	// Store is the outermost store: the one to decide on.
	Store backend.Store
	// DenyCache is the stack's deny cache, nil without one.
	DenyCache *denycache.Store
	// Fallback is the stack's fallback store, nil without one.
	Fallback *fallback.Store
}

// Close closes the deny cache, if any. It does not close the store the
// stack was built on: its client is the caller's.
func (s *Stack) Close() error {
	if s.DenyCache == nil {
		return nil
	}
	return s.DenyCache.Close()
}

// The wrappers an Error names.
const (
	LayerDenyCache = "deny cache"
	LayerFallback  = "fallback"
)

// Error is a wrapper New could not make: Layer (LayerDenyCache or
// LayerFallback) and the wrapper's error.
type Error struct {
	Layer string
	Err   error
}

func (e *Error) Error() string { return "storestack: " + e.Layer + ": " + e.Err.Error() }

// Unwrap returns the wrapper's error.
func (e *Error) Unwrap() error { return e.Err }

// New wraps store in the wrappers opts ask for, in the documented order:
// observe(fallback(denycache(store))). Errors from a wrapper are *Error;
// nothing is left open when New fails.
func New(store backend.Store, opts ...Option) (*Stack, error) {
	if store == nil {
		return nil, errors.New("storestack: nil store; pass the store to wrap")
	}
	var o options
	if err := option.Apply(&o, opts); err != nil {
		return nil, fmt.Errorf("storestack: %w", err)
	}
	st := &Stack{Store: store}
	if o.deny {
		d, err := denycache.New(st.Store, o.bus, o.denyOpts...)
		if err != nil {
			return nil, &Error{Layer: LayerDenyCache, Err: err}
		}
		st.Store, st.DenyCache = d, d
	}
	if o.fb {
		f, err := fallback.New(st.Store, o.fbOpts...)
		if err != nil {
			_ = st.Close()
			return nil, &Error{Layer: LayerFallback, Err: err}
		}
		st.Store, st.Fallback = f, f
	}
	if o.obs != nil {
		st.Store = observe.Wrap(st.Store, *o.obs)
	}
	return st, nil
}

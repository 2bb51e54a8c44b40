package backend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// base is a store with one capability.
type base struct{}

func (base) Take(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, nil
}
func (base) Peek(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, nil
}
func (base) Reset(context.Context, backend.Key, algorithms.Rule, time.Time) error { return nil }
func (base) TakeAll(context.Context, []backend.Request) (backend.Result, error) {
	return backend.Result{}, nil
}
func (base) NodeOf(context.Context, backend.Key) string { return "n1" }

// wrap is a wrapper with no capability of its own but Unwrap.
type wrap struct{ backend.Store }

func (w wrap) Unwrap() backend.Store { return w.Store }

// honest answers HonoursContext itself: false, whatever is under it.
type honest struct{ wrap }

func (honest) HonoursContext() bool { return false }

// loop wraps itself.
type loop struct{ base }

func (l *loop) Unwrap() backend.Store { return l }

func TestAsFindsThroughWrappers(t *testing.T) {
	s := wrap{wrap{base{}}}
	l, ok := backend.As[backend.NodeLocator](s)
	require.True(t, ok)
	require.Equal(t, "n1", l.NodeOf(context.Background(), backend.Key{ID: "x"}))
	b, ok := backend.As[base](s)
	require.True(t, ok, "a concrete type is found too")
	require.Equal(t, base{}, b)

	_, ok = backend.As[backend.ContextHonourer](s)
	require.False(t, ok, "no store in the chain honours contexts")
	h, ok := backend.As[backend.ContextHonourer](wrap{honest{wrap{base{}}}})
	require.True(t, ok)
	require.False(t, h.HonoursContext(), "the outermost answer wins")

	_, ok = backend.As[backend.NodeLocator](wrap{plain{}})
	require.False(t, ok)
	_, ok = backend.As[backend.NodeLocator](nil)
	require.False(t, ok, "a nil store has nothing")
	_, ok = backend.As[backend.EvictionCounter](&loop{})
	require.False(t, ok, "a wrapper of itself ends the walk")
}

// plain is a store with no capability.
type plain struct{ backend.Store }

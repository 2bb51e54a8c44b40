package storestack_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter/storestack"
)

// layers names the wrappers of s from the outside in, down to the store.
func layers(s backend.Store) []string {
	var out []string
	for range 8 {
		switch s.(type) {
		case *denycache.Store:
			out = append(out, "denycache")
		case *fallback.Store:
			out = append(out, "fallback")
		case *memorystore.Store:
			return append(out, "memory")
		default:
			out = append(out, "observe")
		}
		w, ok := s.(backend.Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	return out
}

// The stack is observe(fallback(denycache(store))) whatever the options'
// order; the control, the options applied by hand in theirs, gives
// another stack, which layers tells apart.
func TestNewStacksInTheDocumentedOrder(t *testing.T) {
	want := []string{"observe", "fallback", "denycache", "memory"}
	obs := storestack.WithObserver(observe.Observer{OnDecision: func(context.Context, observe.Decision) {}})
	orders := [][]storestack.Option{
		{storestack.WithDenyCache(nil), storestack.WithFallback(), obs},
		{obs, storestack.WithFallback(), storestack.WithDenyCache(nil)},
		{storestack.WithFallback(), obs, nil, storestack.WithDenyCache(nil)},
	}
	for i, opts := range orders {
		mem, err := memorystore.New()
		require.NoError(t, err)
		st, err := storestack.New(mem, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		require.Equal(t, want, layers(st.Store), "options order %d", i)
		require.NotNil(t, st.DenyCache)
		require.NotNil(t, st.Fallback)
		_, each := st.Store.(backend.EachTaker)
		require.True(t, each, "the stack hands back each request's result")
	}

	// Control: denycache(fallback(store)), the order limitkit-rls used.
	mem, err := memorystore.New()
	require.NoError(t, err)
	fb, err := fallback.New(mem)
	require.NoError(t, err)
	d, err := denycache.New(fb, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.NotEqual(t, want[1:], layers(d), "the check tells the other order apart")
}

// A wrapper's bad option is an *Error naming the wrapper, and nothing is
// left open; a nil store is refused.
func TestNewNamesTheWrapperThatFailed(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	_, err = storestack.New(mem, storestack.WithDenyCache(nil, denycache.WithMaxEntries(-1)))
	var se *storestack.Error
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, storestack.LayerDenyCache, se.Layer)
	_, err = storestack.New(mem, storestack.WithDenyCache(nil), storestack.WithFallback(fallback.WithTimeout(-1)))
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, storestack.LayerFallback, se.Layer)
	_, err = storestack.New(nil)
	require.Error(t, err)
}

// Example: a store with a deny cache and a fallback store, in the
// documented order.
func ExampleNew() {
	mem, _ := memorystore.New()
	st, err := storestack.New(mem, storestack.WithFallback(), storestack.WithDenyCache(nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_, isFallback := st.Store.(*fallback.Store)
	fmt.Println(isFallback, st.DenyCache != nil)
	// Output: true true
}

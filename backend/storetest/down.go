package storetest

import (
	"context"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Down is a backend.Store whose every call fails with Err, like a Redis
// store with Redis down. Tests of what sits above a store use it.
type Down struct{ Err error }

// Take implements backend.Store.
func (d Down) Take(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, d.Err
}

// Peek implements backend.Store.
func (d Down) Peek(context.Context, backend.Request) (backend.Result, error) {
	return backend.Result{}, d.Err
}

// Reset implements backend.Store.
func (d Down) Reset(context.Context, backend.Key, algorithms.Rule, time.Time) error { return d.Err }

// TakeAll implements backend.Store.
func (d Down) TakeAll(context.Context, []backend.Request) (backend.Result, error) {
	return backend.Result{}, d.Err
}

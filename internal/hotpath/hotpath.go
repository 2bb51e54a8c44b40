// Package hotpath links the limiter to a store that decides in this
// process (backend/memorystore) without a backend.Request: a Request is
// about 200 bytes built and copied on every call through the Store
// interface, and its Validate repeats what the limiter checked when its
// configuration was set. The store registers itself here; the limiter asks
// once, in New, whether its store has a Take.
//
// The store's Take method and its Take here run the same code below the
// checks, so the conformance suite, which calls Take, covers both.
package hotpath

import (
	"sync"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Take decides a request of cost units for the key (prefix, id) under
// rule at now (ms since the Unix epoch). The caller has checked what
// backend.Request.Validate would: rule is resolved, the prefix is valid,
// id is not empty, 1 <= cost <= rule.Limit, now >= 0, and rule holds no
// leases.
type Take func(prefix, id string, rule *algorithms.Rule, now, cost int64) backend.Result

var (
	mu      sync.Mutex
	finders []func(backend.Store) Take
)

// Register adds a finder: a function that returns a store's Take, or nil
// for a store it does not know.
func Register(find func(backend.Store) Take) {
	mu.Lock()
	defer mu.Unlock()
	finders = append(finders, find)
}

// Of returns store's Take, or nil when no registered finder knows it.
func Of(store backend.Store) Take {
	mu.Lock()
	defer mu.Unlock()
	for _, find := range finders {
		if t := find(store); t != nil {
			return t
		}
	}
	return nil
}

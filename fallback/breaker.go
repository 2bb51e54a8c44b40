package fallback

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/sony/gobreaker/v2"
)

// breaker is the circuit breaker of one node (or of the whole primary).
type breaker struct {
	node string
	cb   *gobreaker.CircuitBreaker[backend.Result]
	// openedAt is the Unix nanosecond time the breaker last opened.
	openedAt atomic.Int64
	// used is when a request was last routed to it (Unix ns).
	used     atomic.Int64
	degraded atomic.Uint64
	failures atomic.Uint64
	// lastErr is the node's last failure, the cause of an opening.
	lastErr atomic.Pointer[error]
	// epoch counts the failures counted (see execute).
	epoch atomic.Uint64
	// probing reports that the breaker is half-open.
	probing atomic.Bool
	// abandonProbe is set while a probe of an abandoned call runs (see
	// executeProbed).
	abandonProbe atomic.Bool
}

func stateOf(s gobreaker.State) backend.BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return backend.BreakerOpen
	case gobreaker.StateHalfOpen:
		return backend.BreakerHalfOpen
	default:
		return backend.BreakerClosed
	}
}

// forgetAfter is how long a node's breaker is kept after the last request
// routed to it: two open timeouts, so that a breaker that opened lives
// through one probe period (see the package doc).
func (c *options) forgetAfter() int64 { return int64(2 * c.openTimeout) }

// newBreaker returns a closed breaker for node ("" for the only one).
func (s *shared) newBreaker(node string) *breaker {
	b := &breaker{node: node}
	name := s.cfg.name
	if node != "" {
		name += "/" + node
	}
	b.cb = gobreaker.NewCircuitBreaker[backend.Result](gobreaker.Settings{
		Name:        name,
		MaxRequests: s.cfg.probes,
		Timeout:     s.cfg.openTimeout,
		ReadyToTrip: func(counts gobreaker.Counts) bool {
			return counts.ConsecutiveFailures >= s.cfg.threshold
		},
		IsExcluded: func(err error) bool {
			if err == nil {
				return false // gobreaker asks of every success too: no allocation
			}
			_, byCaller := errors.AsType[callerError](err)
			_, counted := errors.AsType[sameEvent](err)
			return byCaller || counted
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.probing.Store(to == gobreaker.StateHalfOpen)
			s.queue(b, stateOf(from), stateOf(to))
		},
	})
	return b
}

// locatorOf returns the backend.NodeLocator of s or of a store it wraps.
func locatorOf(s backend.Store) backend.NodeLocator {
	l, _ := backend.As[backend.NodeLocator](s)
	return l
}

// breakerForRequest returns the breaker of the node that owns the key req
// writes: an exact key's (backend.ExactKey) own node, not Key's.
func (s *shared) breakerForRequest(ctx context.Context, req *backend.Request) *breaker {
	if req.Exact.Base != "" && s.reqLocator != nil && !skipRequestLocator {
		return s.breakerOf(ctx, s.reqLocator.NodeOfRequest(ctx, req))
	}
	return s.breakerFor(ctx, req.Key)
}

// skipRequestLocator routes exact keys by Key's node, as before
// breakerForRequest: a control.
var skipRequestLocator = false

// breakerFor returns the breaker of the node that owns key.
func (s *shared) breakerFor(ctx context.Context, key backend.Key) *breaker {
	if s.locator == nil {
		return s.one
	}
	return s.breakerOf(ctx, s.locator.NodeOf(ctx, key))
}

// breakerOf returns the breaker of node ("": not known).
func (s *shared) breakerOf(_ context.Context, node string) *breaker {
	if !s.cluster.Load() {
		if node == "" {
			return s.one // a single node, or a cluster whose map is not known yet
		}
		s.becomeCluster()
	}
	// From here on, keys whose node the locator cannot tell ("") get a
	// breaker of their own, forgotten like the others when unused.
	now := time.Now().UnixNano()
	s.nodesMu.RLock()
	b := s.nodes[node]
	s.nodesMu.RUnlock()
	if b == nil {
		s.nodesMu.Lock()
		if b = s.nodes[node]; b == nil {
			if s.nodes == nil {
				s.nodes = make(map[string]*breaker)
			}
			b = s.newBreaker(node)
			b.used.Store(now) // before a sweep can see it
			s.nodes[node] = b
		}
		s.nodesMu.Unlock()
	}
	if b.used.Load() < now-int64(time.Millisecond) {
		b.used.Store(now) // at most one store a millisecond: less contention
	}
	if last := s.swept.Load(); now-last > s.cfg.forgetAfter()/4 && s.swept.CompareAndSwap(last, now) {
		s.sweep(now)
	}
	return b
}

// sweep forgets the node breakers unused for forgetAfter; those not closed
// are reported as changing to backend.BreakerClosed.
func (s *shared) sweep(now int64) {
	var gone []*breaker
	s.nodesMu.Lock()
	for node, b := range s.nodes {
		if now-b.used.Load() > s.cfg.forgetAfter() {
			delete(s.nodes, node)
			gone = append(gone, b)
		}
	}
	s.nodesMu.Unlock()
	for _, b := range gone {
		if st := stateOf(b.cb.State()); st != backend.BreakerClosed {
			s.queue(b, st, backend.BreakerClosed)
		}
	}
}

// becomeCluster switches to a breaker per node, when the locator first
// names a node. The only breaker is no longer used: if it is not closed,
// the hook sees it close.
func (s *shared) becomeCluster() {
	s.nodesMu.Lock()
	first := !s.cluster.Swap(true)
	s.nodesMu.Unlock()
	if st := stateOf(s.one.cb.State()); first && st != backend.BreakerClosed {
		s.queue(s.one, st, backend.BreakerClosed)
	}
}

// breakers returns the only breaker, or on a cluster the node breakers,
// sorted by node.
func (s *shared) breakers() []*breaker {
	if !s.cluster.Load() {
		return []*breaker{s.one}
	}
	s.nodesMu.RLock()
	bs := make([]*breaker, 0, len(s.nodes))
	for _, b := range s.nodes {
		bs = append(bs, b)
	}
	s.nodesMu.RUnlock()
	slices.SortFunc(bs, func(a, b *breaker) int { return strings.Compare(a.node, b.node) })
	return bs
}

// State returns the breaker's current state. With a breaker per node it is
// the worst of them: open when any is open, else half-open when any is
// half-open, else closed. Stats.Nodes tells them apart.
func (s *Store) State() backend.BreakerState {
	if s.cluster.Load() {
		s.sweep(time.Now().UnixNano())
	}
	st := backend.BreakerClosed
	for _, b := range s.breakers() {
		st = worse(st, stateOf(b.cb.State()))
	}
	s.deliver()
	return st
}

// worse returns the worse of two states.
func worse(a, b backend.BreakerState) backend.BreakerState {
	rank := func(s backend.BreakerState) int {
		switch s {
		case backend.BreakerOpen:
			return 2
		case backend.BreakerHalfOpen:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// untilProbe estimates how long until the breaker lets a probe through.
func (b *breaker) untilProbe(openTimeout time.Duration) time.Duration {
	opened := b.openedAt.Load()
	if opened == 0 {
		return openTimeout
	}
	return max(time.Until(time.Unix(0, opened).Add(openTimeout)), time.Millisecond)
}

package adaptive

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/limitkit/limitkit/clock"
)

// ErrThrottled is returned for an outgoing call that a Throttle refused
// locally, without sending it.
var ErrThrottled = errors.New("adaptive: call throttled locally: the backend is refusing calls")

// The defaults of ThrottleConfig.
const (
	DefaultK              = 2
	DefaultThrottleWindow = 2 * time.Minute
	DefaultBuckets        = 20
)

// ThrottleConfig configures a Throttle. Every zero field takes its
// default.
type ThrottleConfig struct {
	// K is how many requests per accepted one the backend may be sent
	// before the client refuses some itself (default DefaultK; at least
	// 1). Lower is more aggressive; 2 wastes at most one request in two on
	// a backend that refuses everything.
	K float64
	// Window is the span requests and accepts are counted over (default
	// DefaultThrottleWindow), in Buckets steps (default DefaultBuckets):
	// the counts forget a bucket at a time.
	Window  time.Duration
	Buckets int
	// Clock reads time (default clock.System).
	Clock clock.Clock
	// Rand returns a number in [0, 1) (default math/rand/v2's Float64);
	// tests make it deterministic.
	Rand func() float64
}

// Throttle is client-side adaptive throttling, as in Google's SRE book
// (chapter 21, "Handling Overload"): a client counts, over a sliding
// window, the requests it attempted and those the backend accepted, and
// refuses a new request locally with probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// so that a backend refusing most calls is sent about K per accepted one,
// not every retry of every caller. Requests refused locally count as
// requests: while the backend refuses, the probability rises.
//
// Call Allow before each call and Accepted after a call the backend
// accepted (answered other than with an overload refusal; an error of
// the application is an accept). It is safe for concurrent use.
type Throttle struct {
	k      float64
	width  time.Duration
	clk    clock.Clock
	rnd    func() float64
	mu     sync.Mutex
	counts []bucket
	head   int       // the current bucket
	at     time.Time // the start of the current bucket
	req    int64     // sums over counts
	acc    int64
}

type bucket struct{ req, acc int64 }

// NewThrottle checks cfg and returns a Throttle.
func NewThrottle(cfg ThrottleConfig) (*Throttle, error) {
	if cfg.K == 0 {
		cfg.K = DefaultK
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultThrottleWindow
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	switch {
	case !(cfg.K >= 1):
		return nil, fmt.Errorf("adaptive: throttle K is %v; give 1 or more (default 2)", cfg.K)
	case cfg.Window < 0 || cfg.Buckets < 0 || cfg.Window < time.Duration(cfg.Buckets):
		return nil, fmt.Errorf("adaptive: throttle window %v in %d buckets; give a positive window of at least 1 ns per bucket", cfg.Window, cfg.Buckets)
	}
	return &Throttle{k: cfg.K, width: cfg.Window / time.Duration(cfg.Buckets), clk: cfg.Clock, rnd: cfg.Rand,
		counts: make([]bucket, cfg.Buckets), at: cfg.Clock.Now()}, nil
}

// Allow counts a request and reports whether to send it: false means
// refuse it locally (ErrThrottled).
func (t *Throttle) Allow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	p := t.probability()
	t.counts[t.head].req++
	t.req++
	return p <= 0 || t.rnd() >= p
}

// Accepted counts a request the backend accepted.
func (t *Throttle) Accepted() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	t.counts[t.head].acc++
	t.acc++
}

// Probability returns the chance that Allow refuses the next request.
func (t *Throttle) Probability() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	return t.probability()
}

// Counts returns the requests and accepts inside the window.
func (t *Throttle) Counts() (requests, accepts int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	return t.req, t.acc
}

func (t *Throttle) probability() float64 {
	return max(0, (float64(t.req)-t.k*float64(t.acc))/float64(t.req+1))
}

// advance moves the current bucket to now, forgetting the buckets that
// left the window.
func (t *Throttle) advance() {
	steps := int64(t.clk.Now().Sub(t.at) / t.width)
	if steps <= 0 {
		return // a clock stepped back keeps the current bucket
	}
	if steps >= int64(len(t.counts)) {
		clear(t.counts)
		t.req, t.acc = 0, 0
		t.at = t.at.Add(time.Duration(steps) * t.width)
		return
	}
	for range steps {
		t.head = (t.head + 1) % len(t.counts)
		b := &t.counts[t.head]
		t.req -= b.req
		t.acc -= b.acc
		*b = bucket{}
	}
	t.at = t.at.Add(time.Duration(steps) * t.width)
}

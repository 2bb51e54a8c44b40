package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/limitkit/limitkit/clock"
)

// Priority is a request's class. Higher values are more important; the
// zero value is Default.
type Priority int8

// The classes.
const (
	// Sheddable requests go first under overload: prefetches, batch
	// jobs, retries that can wait.
	Sheddable Priority = -1
	// Default is every request not classed otherwise.
	Default Priority = 0
	// Critical requests are shed last: the whole limit is theirs, and
	// they are taken from the queue first.
	Critical Priority = 1
)

// String returns "sheddable", "default" or "critical", the values of the
// priority label of metrics.
func (p Priority) String() string {
	switch {
	case p <= Sheddable:
		return "sheddable"
	case p >= Critical:
		return "critical"
	}
	return "default"
}

// ParsePriority reads a class from its name (as String writes it).
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "sheddable":
		return Sheddable, nil
	case "default", "":
		return Default, nil
	case "critical":
		return Critical, nil
	}
	return Default, fmt.Errorf("priority %q is unknown; use critical, default or sheddable", s)
}

// class maps a priority to its queue index, 0 the lowest.
func class(p Priority) int { return int(max(Sheddable, min(Critical, p)) - Sheddable) }

const classes = 3

// ErrLimited is returned by Acquire when a request is refused: the limit
// is reached and it could not wait (no queue, a full one, or too little
// time left before its deadline), it was shed from the queue for a higher
// class, or its wait ran out.
var ErrLimited = errors.New("adaptive: concurrency limit reached")

// The defaults of Config.
const (
	DefaultInitial        = 20
	DefaultMin            = 1
	DefaultMax            = 1000
	DefaultWindow         = time.Second
	DefaultMinSamples     = 10
	DefaultMaxWait        = 50 * time.Millisecond
	DefaultDefaultShare   = 0.9
	DefaultSheddableShare = 0.75
)

// Config configures a Limiter. Every zero field takes its default.
type Config struct {
	// Name names the limiter in logs and metrics (default "adaptive").
	Name string
	// Law moves the limit (default &Gradient2{}). Give each Limiter its
	// own: laws keep state.
	Law Law
	// Initial is the limit before the first window (default
	// DefaultInitial, clamped into [Min, Max]).
	Initial int
	// Min and Max bound the limit (defaults DefaultMin and DefaultMax).
	Min, Max int
	// Window is the shortest sampling window (default DefaultWindow):
	// the limit changes at most once per window, and only after
	// MinSamples requests completed in it (default DefaultMinSamples).
	Window     time.Duration
	MinSamples int
	// DefaultShare and SheddableShare are the parts of the limit Default
	// and Sheddable requests may fill (defaults 0.9 and 0.75); the rest
	// is kept for the classes above. Critical requests may fill it all.
	DefaultShare, SheddableShare float64
	// QueueSize is how many requests may wait for a slot (default 0: none
	// wait, a request over the limit is refused at once). A request of a
	// higher class finding the queue full takes the place of the newest
	// waiter of the lowest class below it, which is refused.
	QueueSize int
	// MaxWait bounds a wait (default DefaultMaxWait). A request with a
	// deadline waits at most until its deadline less the latency the
	// limiter measures now, so that it is refused while it can still be
	// answered rather than served after its caller gave up.
	MaxWait time.Duration
	// LIFO serves each class's newest waiter first (default FIFO, the
	// oldest first). Under a long overload LIFO serves requests whose
	// callers are still waiting, at the cost of fairness.
	LIFO bool
	// Clock times the requests and the windows (default clock.System;
	// clock.Fake in tests, whose After also times the waits).
	Clock clock.Clock
	// Observer receives the decisions and the limit's changes.
	Observer Observer
}

// Limiter is an adaptive concurrency limiter: it bounds the requests in
// flight by a limit that a Law moves from the latency it measures.
//
//	lim, err := adaptive.New(adaptive.Config{Max: 500})
//	tok, err := lim.Acquire(ctx, adaptive.Default)
//	if err != nil { ... } // adaptive.ErrLimited: answer 503
//	defer tok.OnSuccess()  // or OnDropped (timed out, overloaded below), OnIgnore
//
// Each Token is released once, by one of its methods; the latency from
// Acquire to the release is the sample. It is safe for concurrent use.
type Limiter struct {
	cfg Config
	clk clock.Clock
	obs Observer

	mu       sync.Mutex
	limit    float64
	inflight int
	queue    [classes][]*waiter
	queued   int
	win      window
	lastRTT  time.Duration // the last window's mean, for wait bounds
}

type window struct {
	start    time.Time
	n, ok    int
	sum      time.Duration
	min      time.Duration
	inflight int
	dropped  bool
	rtts     []time.Duration // the latencies, for P90; at most keptRTTs
}

// keptRTTs bounds the latencies a window keeps for its percentile: past
// it, new ones overwrite old ones in turn.
const keptRTTs = 1024

type waiter struct {
	p  Priority
	ch chan bool // true: granted a slot; false: shed
}

// New checks cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := withDefaults(&cfg); err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	l := &Limiter{cfg: cfg, clk: cfg.Clock, obs: cfg.Observer,
		limit: float64(max(cfg.Min, min(cfg.Max, cfg.Initial)))}
	l.win.start = l.clk.Now()
	return l, nil
}

func withDefaults(c *Config) error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Initial, DefaultInitial)
	def(&c.Min, DefaultMin)
	def(&c.Max, DefaultMax)
	def(&c.MinSamples, DefaultMinSamples)
	if c.Name == "" {
		c.Name = "adaptive"
	}
	if c.Law == nil {
		c.Law = &Gradient2{}
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.DefaultShare == 0 {
		c.DefaultShare = DefaultDefaultShare
	}
	if c.SheddableShare == 0 {
		c.SheddableShare = DefaultSheddableShare
	}
	if c.Clock == nil {
		c.Clock = clock.System
	}
	return check(c)
}

func check(c *Config) error {
	switch {
	case c.Min < 1 || c.Max < c.Min:
		return fmt.Errorf("the bounds are Min %d, Max %d; give 1 <= Min <= Max", c.Min, c.Max)
	case c.Initial < 0 || c.MinSamples < 0 || c.QueueSize < 0:
		return errors.New("Initial, MinSamples and QueueSize must not be negative")
	case c.Window < 0 || c.MaxWait < 0:
		return errors.New("Window and MaxWait must not be negative")
	case !(c.DefaultShare > 0 && c.DefaultShare <= 1) || !(c.SheddableShare > 0 && c.SheddableShare <= c.DefaultShare):
		return fmt.Errorf("the shares are DefaultShare %v, SheddableShare %v; give 0 < SheddableShare <= DefaultShare <= 1", c.DefaultShare, c.SheddableShare)
	}
	if ch, ok := c.Law.(checker); ok {
		return ch.check()
	}
	return nil
}

// Limit returns the limit in force.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cap(Critical)
}

// InFlight returns the requests holding a token.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}

// Name returns the limiter's name (Config.Name).
func (l *Limiter) Name() string { return l.cfg.Name }

// Law returns the name of the limiter's Law ("gradient2", "vegas"…), as
// its metrics and logs label it.
func (l *Limiter) Law() string { return l.cfg.Law.Name() }

// cap is how many requests may be in flight when one of class p is
// admitted: its share of the limit, at least 1.
func (l *Limiter) cap(p Priority) int {
	share := 1.0
	switch {
	case p <= Sheddable:
		share = l.cfg.SheddableShare
	case p < Critical:
		share = l.cfg.DefaultShare
	}
	return max(1, int(math.Floor(l.limit*share)))
}

// Acquire admits a request of class p, waiting in the queue when the
// limit is reached and Config.QueueSize allows. It returns ErrLimited
// when the request is refused, or ctx's error when ctx ended while it
// waited.
func (l *Limiter) Acquire(ctx context.Context, p Priority) (*Token, error) {
	now := l.clk.Now()
	l.mu.Lock()
	if l.inflight < l.cap(p) && !l.waitingFrom(p) {
		t := l.admitLocked(ctx, p, now)
		l.mu.Unlock()
		l.decided(ctx, p, Admitted, 0, t.inflight)
		return t, nil
	}
	wait := l.waitBound(ctx, now)
	if wait <= 0 || l.cfg.QueueSize == 0 {
		inflight := l.inflight
		l.mu.Unlock()
		l.decided(ctx, p, Rejected, 0, inflight)
		return nil, ErrLimited
	}
	w := &waiter{p: p, ch: make(chan bool, 1)}
	shed := l.enqueueLocked(w)
	inflight := l.inflight
	l.mu.Unlock()
	switch shed {
	case w:
		l.decided(ctx, p, Rejected, 0, inflight)
		return nil, ErrLimited
	case nil:
	default:
		shed.ch <- false
	}
	return l.await(ctx, w, now, wait)
}

// waitingFrom reports waiters of class p or above, whom a newcomer must
// not pass.
func (l *Limiter) waitingFrom(p Priority) bool {
	for c := class(p); c < classes; c++ {
		if len(l.queue[c]) > 0 {
			return true
		}
	}
	return false
}

// waitBound is how long a request may wait: MaxWait, cut so that it stops
// waiting while its deadline leaves the time the last window's requests
// took.
func (l *Limiter) waitBound(ctx context.Context, now time.Time) time.Duration {
	wait := l.cfg.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, dl.Sub(now)-l.lastRTT)
	}
	return wait
}

// enqueueLocked queues w; when the queue is full it sheds the newest
// waiter of the lowest class below w's and returns it, to be told outside
// the lock, or returns w itself, not queued, when there is none.
func (l *Limiter) enqueueLocked(w *waiter) *waiter {
	var victim *waiter
	if l.queued >= l.cfg.QueueSize {
		low := 0
		for low < class(w.p) && len(l.queue[low]) == 0 {
			low++
		}
		if low == class(w.p) {
			return w
		}
		q := l.queue[low]
		victim, q[len(q)-1] = q[len(q)-1], nil
		l.queue[low] = q[:len(q)-1]
		l.queued--
	}
	l.queue[class(w.p)] = append(l.queue[class(w.p)], w)
	l.queued++
	return victim
}

// await waits for w's grant, its shedding, its wait bound or ctx.
func (l *Limiter) await(ctx context.Context, w *waiter, start time.Time, wait time.Duration) (*Token, error) {
	timer := clock.After(l.clk, wait)
	var outcome Outcome
	var err error
	select {
	case granted := <-w.ch:
		return l.woken(ctx, w, granted, start)
	case <-timer:
		outcome, err = Expired, ErrLimited
	case <-ctx.Done():
		outcome, err = Canceled, ctx.Err()
	}
	l.mu.Lock()
	if !l.dequeueLocked(w) {
		// Granted or shed meanwhile: that answer stands.
		l.mu.Unlock()
		return l.woken(ctx, w, <-w.ch, start)
	}
	inflight := l.inflight
	l.mu.Unlock()
	l.decided(ctx, w.p, outcome, l.clk.Now().Sub(start), inflight)
	return nil, err
}

// woken ends a wait that was answered: granted, the slot was taken on
// w's behalf (grantLocked).
func (l *Limiter) woken(ctx context.Context, w *waiter, granted bool, start time.Time) (*Token, error) {
	now := l.clk.Now()
	if !granted {
		l.mu.Lock()
		inflight := l.inflight
		l.mu.Unlock()
		l.decided(ctx, w.p, Shed, now.Sub(start), inflight)
		return nil, ErrLimited
	}
	l.mu.Lock()
	t := &Token{l: l, ctx: ctx, p: w.p, start: now, inflight: l.inflight}
	l.mu.Unlock()
	l.decided(ctx, w.p, Queued, now.Sub(start), t.inflight)
	return t, nil
}

func (l *Limiter) dequeueLocked(w *waiter) bool {
	c := class(w.p)
	for i, x := range l.queue[c] {
		if x == w {
			l.queue[c] = append(l.queue[c][:i], l.queue[c][i+1:]...)
			l.queued--
			return true
		}
	}
	return false
}

func (l *Limiter) admitLocked(ctx context.Context, p Priority, now time.Time) *Token {
	l.inflight++
	l.win.inflight = max(l.win.inflight, l.inflight)
	return &Token{l: l, ctx: ctx, p: p, start: now, inflight: l.inflight}
}

// grantLocked gives free slots to waiters, the highest class first, and
// returns them to be told outside the lock.
func (l *Limiter) grantLocked(granted []*waiter) []*waiter {
	for l.queued > 0 {
		c := classes - 1
		for len(l.queue[c]) == 0 {
			c--
		}
		// A class that cannot be admitted leaves none below it that can.
		if l.inflight >= l.cap(Priority(c)+Sheddable) {
			break
		}
		q := l.queue[c]
		var w *waiter
		if l.cfg.LIFO {
			w, q[len(q)-1] = q[len(q)-1], nil
			l.queue[c] = q[:len(q)-1]
		} else {
			w, q[0] = q[0], nil
			l.queue[c] = q[1:]
		}
		l.queued--
		l.inflight++
		l.win.inflight = max(l.win.inflight, l.inflight)
		granted = append(granted, w)
	}
	return granted
}

// release ends a token: a sample of rtt unless ignored.
func (l *Limiter) release(t *Token, r Result) {
	now := l.clk.Now()
	rtt := now.Sub(t.start)
	var buf [4]*waiter
	l.mu.Lock()
	l.inflight--
	sample := r
	if t.start.Before(l.win.start) {
		// Admitted under an earlier window's limit: its latency says how
		// that limit did, which the law has already been told or will
		// have moved past. Counting it would lag the law by a latency
		// (several windows when overload slows requests), and it
		// overshoots.
		sample = Ignored
	}
	change, changed := l.sampleLocked(now, rtt, sample)
	granted := l.grantLocked(buf[:0])
	l.mu.Unlock()
	for _, w := range granted {
		w.ch <- true
	}
	if l.obs.OnRelease != nil {
		l.obs.OnRelease(t.ctx, Release{Limiter: l.cfg.Name, Priority: t.p, Result: r, Latency: rtt})
	}
	if changed && l.obs.OnLimit != nil {
		l.obs.OnLimit(change)
	}
}

// sampleLocked adds a sample to the window and, when the window is over,
// moves the limit.
func (l *Limiter) sampleLocked(now time.Time, rtt time.Duration, r Result) (LimitChange, bool) {
	w := &l.win
	switch r {
	case Ignored:
		return LimitChange{}, false
	case Dropped:
		// Its latency counts too: the request took at least this long.
		w.dropped = true
		fallthrough
	default:
		if len(w.rtts) < keptRTTs {
			w.rtts = append(w.rtts, rtt)
		} else {
			w.rtts[w.ok%keptRTTs] = rtt
		}
		w.ok++
		w.sum += rtt
		if w.min == 0 || rtt < w.min {
			w.min = rtt
		}
	}
	w.n++
	if w.n < l.cfg.MinSamples || now.Sub(w.start) < l.cfg.Window {
		return LimitChange{}, false
	}
	sum := Window{Samples: w.n, InFlight: w.inflight, Dropped: w.dropped, MinRTT: w.min}
	if w.ok > 0 {
		sum.RTT = w.sum / time.Duration(w.ok)
		l.lastRTT = sum.RTT
		slices.Sort(w.rtts)
		sum.P90 = w.rtts[min(len(w.rtts)-1, len(w.rtts)*9/10)]
	}
	from := l.cap(Critical)
	next := l.cfg.Law.Update(l.limit, sum)
	if math.IsNaN(next) {
		next = l.limit
	}
	l.limit = max(float64(l.cfg.Min), min(float64(l.cfg.Max), next))
	*w = window{start: now, inflight: l.inflight, rtts: w.rtts[:0]}
	return LimitChange{Limiter: l.cfg.Name, Law: l.cfg.Law.Name(), From: from, To: l.cap(Critical), Window: sum}, true
}

func (l *Limiter) decided(ctx context.Context, p Priority, o Outcome, wait time.Duration, inflight int) {
	if l.obs.OnDecision == nil {
		return
	}
	l.mu.Lock()
	limit := l.cap(Critical)
	l.mu.Unlock()
	l.obs.OnDecision(ctx, Decision{Limiter: l.cfg.Name, Priority: p, Outcome: o, Wait: wait, InFlight: inflight, Limit: limit})
}

// Token is an admitted request's slot. Release it once, with the method
// that says how the request ended; later calls do nothing.
type Token struct {
	l        *Limiter
	ctx      context.Context
	p        Priority
	start    time.Time
	inflight int
	once     sync.Once
}

// OnSuccess releases the slot of a request that completed: its latency
// is a sample.
func (t *Token) OnSuccess() { t.end(Succeeded) }

// OnDropped releases the slot of a request that timed out or was refused
// for overload further down: laws that react to drops (AIMD) lower the
// limit, and its latency, a lower bound, is a sample.
func (t *Token) OnDropped() { t.end(Dropped) }

// OnIgnore releases the slot of a request whose latency says nothing of
// the service (the client went away, it failed validation at once).
func (t *Token) OnIgnore() { t.end(Ignored) }

// Priority returns the class the token was acquired for.
func (t *Token) Priority() Priority { return t.p }

func (t *Token) end(r Result) {
	if t == nil {
		return
	}
	t.once.Do(func() { t.l.release(t, r) })
}

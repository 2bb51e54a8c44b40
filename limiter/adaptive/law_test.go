package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// backend is the service behind a limiter in these tests: flat latency up
// to capacity requests in flight, rising steeply past it: e^6 times the
// base at twice the capacity.
type backend struct {
	capacity int
	base     time.Duration
}

func (b backend) rtt(n int) time.Duration {
	if n <= b.capacity {
		return b.base
	}
	excess := float64(n-b.capacity) / float64(b.capacity)
	return time.Duration(float64(b.base) * math.Exp(6*excess))
}

// round saturates lim: it acquires every slot, lets the fake clock run
// for the latency the backend has at that concurrency, and releases them.
// It returns the concurrency reached.
func round(lim *Limiter, fake *clock.Fake, b backend) int {
	var toks []*Token
	for {
		tok, err := lim.Acquire(context.Background(), Critical)
		if err != nil {
			break
		}
		toks = append(toks, tok)
	}
	fake.Advance(b.rtt(len(toks)))
	for _, tok := range toks {
		tok.OnSuccess()
	}
	return len(toks)
}

// run drives a limiter under law for rounds saturating rounds and returns
// its limit after each.
func run(law Law, initial int, b backend, rounds int) ([]int, error) {
	return runSteps(law, initial, rounds, b)
}

// runSteps drives a limiter for rounds saturating rounds on each backend
// in turn (a step change in capacity) and returns its limit after each.
func runSteps(law Law, initial, rounds int, steps ...backend) ([]int, error) {
	fake := clock.NewFake(t0)
	var limits []int
	lim, err := New(Config{Law: law, Initial: initial, Min: 2, Max: 200, Window: 50 * time.Millisecond,
		MinSamples: 1, Clock: fake})
	if err != nil {
		return nil, err
	}
	for _, b := range steps {
		for range rounds {
			round(lim, fake, b)
			limits = append(limits, lim.Limit())
		}
	}
	return limits, nil
}

// checkRises: under a latency that never rises, the limit grows from
// initial.
func checkRises(law Law) error {
	limits, err := run(law, 10, backend{capacity: 1 << 20, base: 10 * time.Millisecond}, 300)
	if err != nil {
		return err
	}
	if last := limits[len(limits)-1]; last <= 20 {
		return fmt.Errorf("the limit went from 10 to %d under a flat latency", last)
	}
	return nil
}

// checkFalls: risen from below to a capacity past which latency rises,
// the limit stops within ±25% of it; when the capacity is halved it falls
// to within ±25% of the new one.
func checkFalls(law Law) error {
	const rounds = 300
	limits, err := runSteps(law, 10, rounds,
		backend{capacity: 40, base: 10 * time.Millisecond}, backend{capacity: 20, base: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := settled(limits[rounds-50:rounds], 40); err != nil {
		return fmt.Errorf("at capacity 40: %w", err)
	}
	if err := settled(limits[len(limits)-50:], 20); err != nil {
		return fmt.Errorf("at capacity 20: %w", err)
	}
	return nil
}

// settled checks that every limit is within ±25% of capacity.
func settled(limits []int, capacity int) error {
	for _, l := range limits {
		if 4*l < 3*capacity || 4*l > 5*capacity {
			return fmt.Errorf("the limit is %d, outside ±25%% of %d", l, capacity)
		}
	}
	return nil
}

// inverted is a broken law: it moves the limit the other way from law.
type inverted struct{ law Law }

func (i inverted) Name() string { return "inverted" }
func (i inverted) Update(limit float64, w Window) float64 {
	return max(1, 2*limit-i.law.Update(limit, w))
}

func TestLawsRiseUnderLowLatency(t *testing.T) {
	require.NoError(t, checkRises(&Gradient2{}))
	require.NoError(t, checkRises(&AIMD{}))
	require.NoError(t, checkRises(&Vegas{}))
	// Control: a law moving the wrong way is caught.
	require.Error(t, checkRises(inverted{&Gradient2{}}))
	require.Error(t, checkRises(Fixed{}))
}

func TestLawsFallUnderRisingLatency(t *testing.T) {
	require.NoError(t, checkFalls(&Gradient2{}))
	require.NoError(t, checkFalls(&AIMD{Timeout: 15 * time.Millisecond}))
	require.NoError(t, checkFalls(&Vegas{}))
	// Controls: a law moving the wrong way, or not at all, is caught;
	// so is Gradient2 tolerating more than this backend's curve allows.
	require.Error(t, checkFalls(inverted{&Gradient2{}}))
	require.Error(t, checkFalls(Fixed{}))
	require.Error(t, checkFalls(&AIMD{}))
	require.Error(t, checkFalls(inverted{&Vegas{}}))
}

// outside returns the first of limits outside [lo, hi].
func outside(limits []float64, lo, hi float64) error {
	for i, l := range limits {
		if l < lo || l > hi || math.IsNaN(l) {
			return fmt.Errorf("limit %d is %v, outside [%v, %v]", i, l, lo, hi)
		}
	}
	return nil
}

// wild is a law that proposes anything.
type wild struct {
	r     *rand.Rand
	asked []float64
}

func (w *wild) Name() string { return "wild" }
func (w *wild) Update(float64, Window) float64 {
	v := []float64{-5, 0, 1e9, math.NaN(), math.Inf(1), w.r.Float64() * 500}[w.r.IntN(6)]
	w.asked = append(w.asked, v)
	return v
}

func TestLimitNeverLeavesItsBounds(t *testing.T) {
	fake := clock.NewFake(t0)
	law := &wild{r: rand.New(rand.NewPCG(1, 2))}
	var seen []float64
	lim, err := New(Config{Law: law, Min: 3, Max: 40, Window: time.Millisecond, MinSamples: 1, Clock: fake,
		Observer: Observer{OnLimit: func(c LimitChange) { seen = append(seen, float64(c.To)) }}})
	require.NoError(t, err)
	b := backend{capacity: 10, base: time.Millisecond}
	for range 500 {
		n := round(lim, fake, b)
		seen = append(seen, float64(n))
	}
	require.Len(t, law.asked, 500)
	require.NoError(t, outside(seen, 3, 40), "the limit and the concurrency admitted stay in bounds")
	// Control: what the law asked for leaves them, and the check sees it.
	require.Error(t, outside(law.asked, 3, 40))
	// The laws shipped stay in bounds on their own paths too.
	for _, law := range []Law{&Gradient2{}, &AIMD{Timeout: time.Millisecond}, &Vegas{}} {
		limits, err := run(law, 150, backend{capacity: 20, base: time.Millisecond}, 200)
		require.NoError(t, err)
		var f []float64
		for _, l := range limits {
			f = append(f, float64(l))
		}
		require.NoError(t, outside(f, 2, 200), law.Name())
	}
}

func TestGradient2Steps(t *testing.T) {
	// One window at a time, by hand: flat latency adds QueueSize ×
	// Smoothing; latency at four times the baseline multiplies by the
	// gradient's floor, 0.5, before smoothing, with no headroom.
	g := &Gradient2{}
	w := Window{RTT: 10 * time.Millisecond, InFlight: 50, Samples: 10}
	require.InDelta(t, 50*0.8+(50+4)*0.2, g.Update(50, w), 1e-9)
	w.RTT = 40 * time.Millisecond
	// The window enters the warm-up mean capped at 1.5 × 10 ms.
	long := 10e6 + (15e6-10e6)/2
	grad := max(0.5, 1.5*long/40e6)
	require.InDelta(t, 50*0.8+(50*grad)*0.2, g.Update(50, w), 1e-6)
	// An idle window (less than half the limit in flight) leaves it.
	w.InFlight = 20
	require.Equal(t, 50.0, g.Update(50, w))
}

func TestLawParametersAreChecked(t *testing.T) {
	for _, law := range []Law{&Gradient2{Tolerance: 0.5}, &Gradient2{Smoothing: 2}, &Gradient2{QueueSize: -1},
		&Gradient2{LongWindows: -1}, &AIMD{Backoff: 1.5}, &AIMD{Timeout: -1},
		&Vegas{Alpha: -1}, &Vegas{Alpha: 7}, &Vegas{Smoothing: 2}, &Vegas{ProbeWindows: -1}} {
		_, err := New(Config{Law: law})
		require.Error(t, err, "%#v", law)
	}
	for _, cfg := range []Config{{Min: 5, Max: 4}, {Min: -1}, {QueueSize: -1}, {SheddableShare: 0.95},
		{DefaultShare: 1.5}, {Window: -1}} {
		_, err := New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
	_, err := New(Config{})
	require.NoError(t, err)
	require.True(t, errors.Is(ErrLimited, ErrLimited))
}

// roundDeadline is round with callers that give up at deadline: a round
// slower than that ends at it, every request dropped.
func roundDeadline(lim *Limiter, fake *clock.Fake, b backend, deadline time.Duration) (int, time.Duration, bool) {
	var toks []*Token
	for {
		tok, err := lim.Acquire(context.Background(), Critical)
		if err != nil {
			break
		}
		toks = append(toks, tok)
	}
	rtt := b.rtt(len(toks))
	ok := rtt <= deadline
	fake.Advance(min(rtt, deadline))
	for _, tok := range toks {
		if ok {
			tok.OnSuccess()
		} else {
			tok.OnDropped()
		}
	}
	return len(toks), min(rtt, deadline), ok
}

// BenchmarkStepChange runs the setup on a fake clock: a backend of
// capacity C (latency flat to C, e^(6·excess/C) past it) kept saturated
// (offered load above 3×C), C halved then restored, 100 ms windows. It
// reports how many simulated seconds the limit took to settle within ±25%
// of C after each step, goodput against capacity (callers give up at a
// 4×base deadline: those requests are drops, not goodput) and the p99
// latency of requests served, against the base, over the whole run.
// Machine load does not change it.
func BenchmarkStepChange(b *testing.B) {
	for _, tol := range []float64{1.5, 1.2, 1.1} {
		b.Run(fmt.Sprintf("gradient2/tolerance=%v", tol), func(b *testing.B) {
			stepChange(b, func() Law { return &Gradient2{Tolerance: tol} })
		})
	}
	b.Run("vegas", func(b *testing.B) { stepChange(b, func() Law { return &Vegas{} }) })
}

func stepChange(b *testing.B, law func() Law) {
	const c, phaseRounds = 40, 400
	base := 10 * time.Millisecond
	for range b.N {
		fake := clock.NewFake(t0)
		lim, err := New(Config{Law: law(), Initial: 10, Min: 1, Max: 1000, Window: 100 * time.Millisecond, Clock: fake})
		if err != nil {
			b.Fatal(err)
		}
		var settle [3]time.Duration
		var served, capacity float64
		var lat []time.Duration
		for i, cp := range []int{c, c / 2, c} {
			bk := backend{capacity: cp, base: base}
			start := fake.Now()
			settled := time.Duration(-1)
			for range phaseRounds {
				n, rtt, ok := roundDeadline(lim, fake, bk, 4*base)
				if ok {
					served += float64(n)
					for range n {
						lat = append(lat, rtt)
					}
				}
				capacity += float64(cp) * rtt.Seconds() / base.Seconds()
				l := lim.Limit()
				switch in := 4*l >= 3*cp && 4*l <= 5*cp; {
				case !in:
					settled = -1
				case settled < 0:
					settled = fake.Now().Sub(start)
				}
			}
			settle[i] = settled
		}
		slices.Sort(lat)
		b.ReportMetric(settle[1].Seconds(), "s-settle-halved")
		b.ReportMetric(settle[2].Seconds(), "s-settle-restored")
		b.ReportMetric(served/capacity, "goodput/capacity")
		b.ReportMetric(float64(lat[len(lat)*99/100])/float64(base), "p99/base")
	}
}

// checkFloorRises: after the backend's floor doubles for good (latency
// flat at 20 ms to the same capacity), the limit settles within ±25% of
// the capacity again instead of reading the new floor as queueing.
func checkFloorRises(law Law) error {
	const rounds = 300
	limits, err := runSteps(law, 10, rounds,
		backend{capacity: 40, base: 10 * time.Millisecond}, backend{capacity: 40, base: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	return settled(limits[len(limits)-50:], 40)
}

func TestVegasLearnsARisenFloor(t *testing.T) {
	require.NoError(t, checkFloorRises(&Vegas{}))
	// Control: without the probe the old floor stays and the limit
	// falls far below the capacity.
	require.Error(t, checkFloorRises(&Vegas{ProbeWindows: 1 << 30}))
}

func TestVegasSteps(t *testing.T) {
	// By hand, at limit 100 (log10 = 2): the first window learns the
	// floor; a queue of 0 adds Beta × 2; a queue of 10 (between Alpha × 2
	// and Beta × 2) leaves the limit; a queue of 50 takes 2 off; a drop
	// takes 2 off.
	v := &Vegas{}
	w := Window{RTT: 10 * time.Millisecond, MinRTT: 10 * time.Millisecond, InFlight: 100, Samples: 10}
	require.Equal(t, 100.0, v.Update(100, w))
	require.InDelta(t, 112, v.Update(100, w), 1e-9)
	w.RTT = 11_111_111 // ns: queue ceil(100 × (1 − 10/11.11)) = 10
	w.MinRTT = 11 * time.Millisecond
	require.InDelta(t, 100, v.Update(100, w), 1e-9)
	w.RTT = 20 * time.Millisecond // queue 50
	require.InDelta(t, 98, v.Update(100, w), 1e-9)
	w.Dropped = true
	require.InDelta(t, 98, v.Update(100, w), 1e-9)
}

// checkStartsOverloaded: a Gradient2 that starts far above capacity
// learns an overloaded baseline; its probe learns the real one again and
// the limit comes down to within ±25% of the capacity.
func checkStartsOverloaded(g *Gradient2) error {
	limits, err := run(g, 150, backend{capacity: 40, base: 10 * time.Millisecond}, 600)
	if err != nil {
		return err
	}
	return settled(limits[len(limits)-50:], 40)
}

func TestGradient2ProbeLearnsTheBaseline(t *testing.T) {
	require.NoError(t, checkStartsOverloaded(&Gradient2{}))
	// Control: without the probe the overloaded baseline holds the limit
	// far above the capacity.
	require.Error(t, checkStartsOverloaded(&Gradient2{ProbeWindows: 1 << 30}))
}

func TestGradient2P90AndFallAtOnce(t *testing.T) {
	// A window at limit 50 whose mean is flat but whose slowest tenth is
	// four times slower: the mean grows the limit, the p90 lowers it.
	w := Window{RTT: 10 * time.Millisecond, P90: 40 * time.Millisecond, InFlight: 50, Samples: 10}
	warm := func(g *Gradient2) *Gradient2 {
		g.Update(50, Window{RTT: 10 * time.Millisecond, P90: 10 * time.Millisecond, InFlight: 50, Samples: 10})
		return g
	}
	require.Greater(t, warm(&Gradient2{}).Update(50, w), 50.0, "control: the mean does not see the slow tenth")
	smoothed := warm(&Gradient2{P90: true}).Update(50, w)
	require.Less(t, smoothed, 50.0)
	// Unsmoothed, the fall is the gradient's whole: 1.5 × long / 40 ms,
	// long the warm-up mean of 10 and the capped 15 ms, is under its
	// floor 0.5.
	atOnce := warm(&Gradient2{P90: true, FallAtOnce: true}).Update(50, w)
	require.InDelta(t, 50*0.5, atOnce, 1e-6)
	require.Less(t, atOnce, smoothed, "control: smoothing falls less")
}

func TestGradient2ProbeOnlyLowersTheBaseline(t *testing.T) {
	w := func(rtt time.Duration) Window { return Window{RTT: rtt, InFlight: 50, Samples: 10} }
	probeAt := func(probe time.Duration) float64 {
		g := &Gradient2{ProbeWindows: 2}
		g.Update(50, w(10*time.Millisecond))
		require.InDelta(t, (51*0.8+55*0.2)*4/5, g.Update(51, w(10*time.Millisecond)), 1e-9, "a fifth below for the probe")
		g.Update(40, w(probe))                      // the probe's window
		return g.Update(50, w(10*time.Millisecond)) // after it
	}
	// A probe still in overload (every request dropped at a 400 ms
	// deadline) leaves the baseline: 10 ms stays flat and the limit grows.
	require.Greater(t, probeAt(400*time.Millisecond), 50.0)
	// Control: a probe below the baseline lowers it, and the same 10 ms
	// then reads as queueing.
	require.Less(t, probeAt(5*time.Millisecond), 50.0)
}

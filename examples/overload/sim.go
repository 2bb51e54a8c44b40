package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/limiter/adaptive"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// backend is the simulated service: its latency is decided when a request
// arrives, from the requests then in flight.
type backend struct {
	base     time.Duration
	capacity atomic.Int64
	inflight atomic.Int64
}

func (b *backend) latency(n int64) time.Duration {
	c := b.capacity.Load()
	if n <= c {
		return b.base
	}
	excess := float64(n-c) / float64(c)
	return time.Duration(float64(b.base) * math.Exp(min(6*excess, 6)))
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1)
	t := time.NewTimer(b.latency(n))
	defer t.Stop()
	select {
	case <-t.C:
		_, _ = io.WriteString(w, "ok")
	case <-r.Context().Done():
	}
}

// lawNamed returns the adaptive server's law (Setup.check refused others)
// with s's Gradient2 options.
func lawNamed(s Setup) adaptive.Law {
	switch s.Law {
	case "vegas":
		return &adaptive.Vegas{}
	case "aimd":
		return &adaptive.AIMD{}
	}
	return &adaptive.Gradient2{P90: s.P90, FallAtOnce: s.FallAtOnce}
}

// server returns the handler for mode in front of b, and the adaptive
// limiter when there is one.
func server(mode string, s Setup, b *backend, capacity int) (http.Handler, *adaptive.Limiter, error) {
	var cfg adaptive.Config
	switch mode {
	case "unprotected":
		return b, nil, nil
	case "fixed":
		cfg = adaptive.Config{Name: "fixed", Law: adaptive.Fixed{}, Initial: capacity}
	case "adaptive":
		// The service does not know C: it starts low, below any capacity
		// it expects, so that Gradient2 learns the latency of a backend
		// not yet overloaded, and grows from there.
		cfg = adaptive.Config{Name: "adaptive", Law: lawNamed(s), Initial: 4, Max: 1000,
			Window: 100 * time.Millisecond, MinSamples: 5}
	default:
		return nil, nil, fmt.Errorf("mode %q is unknown", mode)
	}
	// A short queue lets a critical request wait for the next free slot;
	// a wait is bounded by half the base latency.
	cfg.QueueSize, cfg.MaxWait = capacity, b.base/2

	lim, err := adaptive.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	mw, err := httplimit.NewAdaptive(lim, httplimit.WithPriority(httplimit.PriorityHeader("X-Priority")))
	if err != nil {
		return nil, nil, err
	}
	return mw.Handler(b), lim, nil
}

// result is one request's end.
type result struct {
	at      time.Duration // since the start, when it ended
	latency time.Duration
	p       adaptive.Priority
	ok      bool
}

// Run offers the load to one server through the three phases and
// measures them; with s.Trace it prints the adaptive limit to trace.
func Run(s Setup, mode string, trace io.Writer) (Report, error) {
	if err := s.check(); err != nil {
		return Report{}, err
	}
	b := &backend{base: s.Base}
	b.capacity.Store(int64(s.Capacity))
	h, lim, err := server(mode, s, b, s.Capacity)
	if err != nil {
		return Report{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	tr := &http.Transport{MaxIdleConnsPerHost: 4096, MaxIdleConns: 4096, IdleConnTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/"

	phase := s.Duration / 3
	caps := []int{s.Capacity, max(1, s.Capacity/2), s.Capacity}
	var (
		mu      sync.Mutex
		results []result
		limits  []limitAt
		wg      sync.WaitGroup
	)
	rate := float64(s.Capacity) * s.Load / s.Base.Seconds()
	interval := time.Duration(float64(time.Second) / rate)
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	next := start
	lastLimit, lastTrace := time.Duration(-1), time.Duration(-1)
	for sent := 0; ; sent++ {
		now := time.Since(start)
		if now >= s.Duration {
			break
		}
		b.capacity.Store(int64(caps[min(2, int(now/phase))]))
		if lim != nil && now-lastLimit >= 20*time.Millisecond {
			limits = append(limits, limitAt{now, lim.Limit()})
			lastLimit = now
		}
		if s.Trace && lim != nil && mode == "adaptive" && now-lastTrace >= 250*time.Millisecond {
			fmt.Fprintf(trace, "trace %6.2fs C=%d limit=%d in-flight=%d\n", now.Seconds(), b.capacity.Load(), lim.Limit(), b.inflight.Load())
			lastTrace = now
		}
		p := priorityOf(rnd.Float64())
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := send(client, url, p, 4*s.Base)
			r.at = time.Since(start)
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
	wg.Wait()
	return Report{Mode: mode, Phases: measure(results, limits, caps, phase, s.Base)}, nil
}

type limitAt struct {
	at    time.Duration
	limit int
}

func priorityOf(f float64) adaptive.Priority {
	switch {
	case f < 0.1:
		return adaptive.Critical
	case f < 0.5:
		return adaptive.Default
	}
	return adaptive.Sheddable
}

// send makes one request with a deadline; ok is a 200 within it.
func send(c *http.Client, url string, p adaptive.Priority, deadline time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return result{p: p}
	}
	req.Header.Set("X-Priority", p.String())
	t := time.Now()
	resp, err := c.Do(req)
	r := result{p: p, latency: time.Since(t)}
	if err != nil {
		return r
	}
	_, err = drain(resp)
	r.ok = err == nil && resp.StatusCode == http.StatusOK && !errors.Is(ctx.Err(), context.DeadlineExceeded)
	return r
}

// measure sums the results by the phase in which they ended.
func measure(results []result, limits []limitAt, caps []int, phase, base time.Duration) []Phase {
	out := make([]Phase, len(caps))
	lat := make([][]time.Duration, len(caps))
	class := make([][3][2]int, len(caps)) // by priority: served, offered
	for _, r := range results {
		i := min(len(caps)-1, int(r.at/phase))
		out[i].Offered++
		count := &class[i][r.p-adaptive.Sheddable]
		count[1]++
		if !r.ok {
			continue
		}
		count[0]++
		out[i].Served++
		lat[i] = append(lat[i], r.latency)
	}
	for i := range out {
		out[i].Capacity = caps[i]
		out[i].Goodput = float64(out[i].Served) / phase.Seconds() / (float64(caps[i]) / base.Seconds())
		out[i].P99 = percentile(lat[i], 0.99)
		out[i].P99Base = out[i].P99.Seconds() / base.Seconds()
		out[i].Critical = ratio(class[i][adaptive.Critical-adaptive.Sheddable])
		out[i].Default = ratio(class[i][adaptive.Default-adaptive.Sheddable])
		out[i].Sheddable = ratio(class[i][0])
		out[i].LimitMin, out[i].LimitMax, out[i].Settle = limitRange(limits, i, phase, caps[i])
	}
	return out
}

func ratio(c [2]int) float64 {
	if c[1] == 0 {
		return 0
	}
	return float64(c[0]) / float64(c[1])
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// limitRange is the limit's range in phase i and the time from the
// phase's start until it stayed within ±25% of capacity to the phase's end.
func limitRange(limits []limitAt, i int, phase time.Duration, capacity int) (lo, hi int, settle time.Duration) {
	lo, settle = math.MaxInt, -1
	from, to := time.Duration(i)*phase, time.Duration(i+1)*phase
	for _, l := range limits {
		if l.at < from || l.at >= to {
			continue
		}
		lo, hi = min(lo, l.limit), max(hi, l.limit)
		inside := 4*l.limit >= 3*capacity && 4*l.limit <= 5*capacity
		switch {
		case !inside:
			settle = -1
		case settle < 0:
			settle = l.at - from
		}
	}
	if hi == 0 {
		lo = 0
	}
	return lo, hi, settle
}

func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}

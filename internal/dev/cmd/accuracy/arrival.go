package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/accuracy"
)

// arrivalResult is what the logs did with a trace replayed by concurrent
// callers that stamp each request with their own clock.
type arrivalResult struct {
	alg                           algorithms.Name
	requests, late                int
	wronglyDenied, wronglyAllowed int
	worst                         int64
}

// measureArrival replays the trace on Redis in real time (sped up by
// speedup), from callers goroutines that each read the clock just before
// sending, as a service's handlers do, so requests reach Redis slightly out
// of timestamp order. Each log's decisions are then judged by an exact
// window over its own admissions at their stamps.
func measureArrival(ctx context.Context, out io.Writer, addr redisTarget, cfg config, callers int, speedup float64) error {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr.addr}, SelectDB: addr.db, DisableCache: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	store, err := rueidisstore.New(rc)
	if err != nil {
		return err
	}
	reqs := accuracy.Generate(cfg.trace)
	span := time.Duration(float64(cfg.trace.Window) * float64(cfg.trace.Windows) / speedup)
	fmt.Fprintf(out, "Arrival order: %d requests replayed in %v by %d callers (trace time ×%g), stamped by the callers' clock.\n\n",
		len(reqs), span.Round(time.Second), callers, speedup)
	fmt.Fprintf(out, "| algorithm | requests | stamped before an already-decided request of the key | wrongly denied | wrongly allowed | most in any window |\n|---|---|---|---|---|---|\n")
	for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog, algorithms.TwoLevel} {
		rule := algorithms.Rule{Algorithm: alg, Limit: cfg.trace.Limit, Window: cfg.trace.Window}
		res, err := replayArrival(ctx, store, rule, reqs, callers, speedup)
		if err != nil {
			return err
		}
		res.alg = alg
		fmt.Fprintf(out, "| `%s` | %d | %d | %d (%.3f%%) | %d | %d |\n", alg, res.requests, res.late,
			res.wronglyDenied, 100*float64(res.wronglyDenied)/float64(res.requests), res.wronglyAllowed, res.worst)
	}
	return nil
}

// stamped is one replayed request: its stamp in trace ms, the order in
// which its decision came back, and the decision.
type stamped struct {
	key     int32
	cost    int32
	at      int64
	done    int64
	allowed bool
}

func replayArrival(ctx context.Context, store backend.Store, rule algorithms.Rule, reqs []accuracy.Request, callers int, speedup float64) (arrivalResult, error) {
	prefix := fmt.Sprintf("arrival:%s:%d:", rule.Algorithm, time.Now().UnixNano())
	base := time.UnixMilli(1_800_000_000_000)
	out := make([]stamped, len(reqs))
	work := make(chan int, callers)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		order   int64
		firstEr error
	)
	start := time.Now()
	// traceNow maps the real clock onto trace time.
	traceNow := func() int64 { return int64(float64(time.Since(start).Milliseconds()) * speedup) }
	for range callers {
		wg.Go(func() {
			for i := range work {
				r := reqs[i]
				at := traceNow()
				d, err := store.Take(ctx, backend.Request{
					Key:  backend.Key{Prefix: prefix, ID: strconv.Itoa(int(r.Key))},
					Rule: rule, Now: base.Add(time.Duration(at) * time.Millisecond), Cost: int64(r.Cost),
				})
				mu.Lock()
				if err != nil && firstEr == nil {
					firstEr = err
				}
				order++
				out[i] = stamped{key: r.Key, cost: r.Cost, at: at, done: order, allowed: d.Allowed}
				mu.Unlock()
			}
		})
	}
	for i, r := range reqs {
		// Send each request at its trace time.
		if wait := time.Duration(float64(r.At)/speedup)*time.Millisecond - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if firstEr != nil {
		return arrivalResult{}, firstEr
	}
	return judgeArrival(out, rule), nil
}

// judgeArrival counts, per key in stamp order, the denials an exact window
// over the admitted requests' stamps would have admitted, the admissions it
// would have denied, and the requests decided after a later-stamped one.
func judgeArrival(out []stamped, rule algorithms.Rule) arrivalResult {
	res := arrivalResult{requests: len(out)}
	byKey := map[int32][]stamped{}
	for _, s := range out {
		byKey[s.key] = append(byKey[s.key], s)
	}
	w := rule.Window.Milliseconds()
	for _, list := range byKey {
		slices.SortStableFunc(list, func(a, b stamped) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return int(a.done - b.done)
		})
		// Late: decided after a request stamped later.
		minDoneAfter := int64(1) << 62
		for i := len(list) - 1; i >= 0; i-- {
			if list[i].done > minDoneAfter {
				res.late++
			}
			minDoneAfter = min(minDoneAfter, list[i].done)
		}
		// Admitted units in (at-w, at], over the admissions' stamps.
		var win []stamped
		var sum int64
		for _, s := range list {
			i := 0
			for i < len(win) && win[i].at <= s.at-w {
				sum -= int64(win[i].cost)
				i++
			}
			win = win[i:]
			fits := sum+int64(s.cost) <= rule.Limit
			switch {
			case s.allowed && !fits:
				res.wronglyAllowed++
			case !s.allowed && fits:
				res.wronglyDenied++
			}
			if s.allowed {
				win = append(win, s)
				sum += int64(s.cost)
				res.worst = max(res.worst, sum)
			}
		}
	}
	return res
}

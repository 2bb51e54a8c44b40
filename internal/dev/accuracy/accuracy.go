// Package accuracy replays a generated request trace through every
// algorithm's Go engine (identical to its Lua twin, by the conformance
// suite) and measures how each one's decisions compare with the exact
// sliding log's. internal/dev/cmd/accuracy prints the results as a table.
package accuracy

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// Request is one request of a trace.
type Request struct {
	// Key is the limited subject's index.
	Key int32
	// Cost is the units the request takes.
	Cost int32
	// At is the request's time in ms.
	At int64
}

// TraceConfig shapes a generated trace. Every field must be positive.
type TraceConfig struct {
	// Seed makes the trace; the same config gives the same trace.
	Seed uint64
	// Keys is the number of keys: 1% heavy hitters (sustained one to four
	// times the limit), 9% bursty (quiet, then bursts of a third of the
	// limit to three times it within seconds) and 90% ordinary (a twentieth
	// to 60% of the limit, in Poisson arrivals).
	Keys int
	// Limit and Window are the rule the trace is shaped for.
	Limit  int64
	Window time.Duration
	// Windows is the trace's length in windows.
	Windows int
}

// DefaultTrace is the trace behind the README's table: 2,000 keys at 100
// per minute for 30 minutes, about 1.7 million requests.
var DefaultTrace = TraceConfig{Seed: 1, Keys: 2000, Limit: 100, Window: time.Minute, Windows: 30}

// Generate returns the trace, sorted by time (then key).
func Generate(cfg TraceConfig) []Request {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c696d69))
	w := cfg.Window.Milliseconds()
	end := w * int64(cfg.Windows)
	limit := float64(cfg.Limit)
	var reqs []Request
	add := func(k int, at int64) {
		cost := int32(1)
		if rng.IntN(20) == 0 {
			cost = int32(2 + rng.IntN(4))
		}
		reqs = append(reqs, Request{Key: int32(k), Cost: cost, At: at})
	}
	// poisson adds arrivals at rate per window over [from, to).
	poisson := func(k int, rate float64, from, to int64) {
		if rate <= 0 {
			return
		}
		mean := float64(w) / rate
		for t := float64(from); ; {
			t += -math.Log(1-rng.Float64()) * mean
			if int64(t) >= to {
				return
			}
			add(k, int64(t))
		}
	}
	for k := range cfg.Keys {
		switch p := k % 100; {
		case p == 0: // heavy hitter
			poisson(k, limit*(1+3*rng.Float64()), 0, end)
		case p < 10: // bursty
			poisson(k, limit*0.05*rng.Float64(), 0, end)
			for range 1 + rng.IntN(2*cfg.Windows/3+1) {
				at := rng.Int64N(end)
				span := 1000 + rng.Int64N(20_000)
				poisson(k, limit*(0.33+2.7*rng.Float64())*float64(w)/float64(span), at, min(at+span, end))
			}
		default:
			poisson(k, limit*(0.05+0.55*rng.Float64()), 0, end)
		}
	}
	slices.SortFunc(reqs, func(a, b Request) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Key, b.Key))
	})
	return reqs
}

// Result is what one algorithm did with a trace.
type Result struct {
	Algorithm algorithms.Name
	// Requests is the number of decisions.
	Requests int
	// Differ counts decisions unlike the sliding log's for the same
	// request, each algorithm keeping its own state.
	Differ int
	// DifferLimited counts them among requests to keys the sliding log
	// denied at least once, out of LimitedRequests.
	DifferLimited, LimitedRequests int
	// WronglyAllowed counts admissions that put more than the limit in the
	// window ending at the request among the algorithm's own admissions;
	// WronglyDenied, denials of requests that would have fit there.
	WronglyAllowed, WronglyDenied int
	// WorstWindow is the most units admitted on one key in any window.
	WorstWindow int64
}

// Rate returns n as a share of the requests, in percent.
func (r Result) Rate(n int) float64 { return 100 * float64(n) / float64(max(r.Requests, 1)) }

// window is a key's admitted units inside the last window, oldest first.
type window struct {
	at   []int64
	cost []int64
	sum  int64
}

func (q *window) slide(now, w int64) {
	i := 0
	for i < len(q.at) && q.at[i] <= now-w {
		q.sum -= q.cost[i]
		i++
	}
	q.at, q.cost = q.at[i:], q.cost[i:]
}

// Replay runs reqs through every named algorithm under the rule of limit
// per win and returns one
// Result per algorithm, in order. The sliding log's Result is the
// reference: it differs from itself nowhere.
func Replay(reqs []Request, keys int, limit int64, win time.Duration, names []algorithms.Name) []Result {
	w := win.Milliseconds()
	exact := decide(reqs, keys, algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: win})
	limited := make([]bool, keys)
	for i, r := range reqs {
		if !exact[i] {
			limited[r.Key] = true
		}
	}
	var out []Result
	for _, name := range names {
		rule := algorithms.Rule{Algorithm: name, Limit: limit, Window: win}
		got := decide(reqs, keys, rule)
		res := Result{Algorithm: name, Requests: len(reqs)}
		wins := make([]window, keys)
		for i, r := range reqs {
			q := &wins[r.Key]
			q.slide(r.At, w)
			fits := q.sum+int64(r.Cost) <= limit
			if limited[r.Key] {
				res.LimitedRequests++
			}
			if got[i] != exact[i] {
				res.Differ++
				if limited[r.Key] {
					res.DifferLimited++
				}
			}
			switch {
			case got[i] && !fits:
				res.WronglyAllowed++
			case !got[i] && fits:
				res.WronglyDenied++
			}
			if got[i] {
				q.at = append(q.at, r.At)
				q.cost = append(q.cost, int64(r.Cost))
				q.sum += int64(r.Cost)
				res.WorstWindow = max(res.WorstWindow, q.sum)
			}
		}
		out = append(out, res)
	}
	return out
}

// decide returns the rule's decision for every request.
func decide(reqs []Request, keys int, rule algorithms.Rule) []bool {
	states := make([]algorithms.State, keys)
	out := make([]bool, len(reqs))
	for i, r := range reqs {
		out[i] = rule.Take(&states[r.Key], r.At, int64(r.Cost)).Allowed
	}
	return out
}

package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// Workload is what every contender is asked to do: decide requests of cost 1
// for keys drawn uniformly from Keys ids, under a limit that never denies
// (Deny false: the measured cost is pure overhead) or one that denies nearly
// everything (Deny true: Limit per Window, and the warm-up has already spent
// every key's allowance).
type Workload struct {
	// Keys is the number of distinct ids requests are spread over.
	Keys int
	// Deny selects the deny-heavy limit instead of the never-deny one.
	Deny bool
	// Limit and Window are the deny-heavy limit; zero means 1 per hour.
	Limit  int64
	Window time.Duration
	// LogWindow is the window of the never-deny limit of the logs, whose
	// limit is at most algorithms.MaxSlidingLogLimit; zero means 1 ms. A
	// log holds the requests of the last LogWindow, so a warm-up at least
	// as long leaves it at its steady size for the workload's rate.
	LogWindow time.Duration
}

// String names the workload in benchmark names and tables, e.g.
// "keys=10000/never-deny" or "keys=100/deny-heavy".
func (w Workload) String() string {
	return "keys=" + strconv.Itoa(w.Keys) + "/" + w.Config()
}

// Config names the limit: "never-deny" or "deny-heavy".
func (w Workload) Config() string {
	if w.Deny {
		return "deny-heavy"
	}
	return "never-deny"
}

// DenyRule returns the deny-heavy limit and window (1 per hour unless set).
func (w Workload) DenyRule() (int64, time.Duration) {
	if w.Limit > 0 && w.Window > 0 {
		return w.Limit, w.Window
	}
	return 1, DenyWindow
}

// Workloads lists the four in-memory workloads: 1 and 10,000 keys, each
// never-deny and deny-heavy (1 per hour).
func Workloads() []Workload {
	return []Workload{{Keys: 1}, {Keys: 1, Deny: true}, {Keys: 10_000}, {Keys: 10_000, Deny: true}}
}

// RedisWorkloads lists the Redis workloads: 10,000 keys never-deny, the
// logs' window being logWindow (the warm-up's length, so that logs are at
// their steady size when measured), and 100 keys deny-heavy at 5 per
// minute.
func RedisWorkloads(logWindow time.Duration) []Workload {
	return []Workload{
		{Keys: 10_000, LogWindow: logWindow},
		{Keys: 100, Deny: true, Limit: 5, Window: time.Minute},
	}
}

// The limits of the two configurations, in each library's own terms.
const (
	// NeverDenyLimit and NeverDenyWindow are the never-deny limit of the
	// counter algorithms (and of the peers that count per window).
	NeverDenyLimit  = int64(1) << 40
	NeverDenyWindow = time.Hour
	// NeverDenyRate is the never-deny rate (and burst) of the token bucket
	// and GCRA peers, per second: far above what one machine can ask.
	NeverDenyRate = 1_000_000_000
	// DenyWindow is the default deny-heavy window: a limit of 1 per hour.
	DenyWindow = time.Hour
)

// neverDenyRules are the never-deny limits tried for a limitkit
// algorithm, most generous first; Rule takes the first the algorithm
// accepts. The last, 10,000 per LogWindow, is for the logs, whose limit
// cannot exceed algorithms.MaxSlidingLogLimit: on one key a fast caller
// can still be denied, and the tables report the share admitted.
func (w Workload) neverDenyRules() []algorithms.Rule {
	lw := w.LogWindow
	if lw <= 0 {
		lw = time.Millisecond
	}
	return []algorithms.Rule{
		{Limit: NeverDenyLimit, Window: NeverDenyWindow},
		{Limit: NeverDenyRate, Window: time.Second},
		{Limit: algorithms.MaxSlidingLogLimit, Window: lw.Truncate(time.Millisecond)},
	}
}

// Rule returns limitkit's rule for alg under the workload's limit. For the
// never-deny limit it is the most generous of neverDenyRules that alg
// accepts (algorithms have their own maximums), so algorithms added later
// are measured without changes here.
func (w Workload) Rule(alg algorithms.Name) algorithms.Rule {
	if w.Deny {
		l, win := w.DenyRule()
		return algorithms.Rule{Algorithm: alg, Limit: l, Window: win}
	}
	rules := w.neverDenyRules()
	for _, r := range rules {
		r.Algorithm = alg
		if r.Validate() == nil {
			return r
		}
	}
	// None fits: return the last, whose error the first decision reports.
	r := rules[len(rules)-1]
	r.Algorithm = alg
	return r
}

// IDs returns the workload's key ids, "user:0" to "user:N-1".
func (w Workload) IDs() []string {
	ids := make([]string, w.Keys)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(i)
	}
	return ids
}

// Decider decides one request of cost 1 for id: admitted or not. An error
// means the limiter could not decide.
type Decider func(ctx context.Context, id string) (bool, error)

// Contender is one limiter under test.
type Contender struct {
	// Name identifies it in tables, e.g. "limitkit store sliding_log" or
	// "x/time/rate (map+mutex)".
	Name string
	// Group is "limitkit", "peer", "seed" (the seed article's script),
	// "floor" or "experiment" (limitkit or a peer with a setting other than
	// the default, measured to size an optimisation; never counted as a
	// peer).
	Group string
	// Client is the Redis client it runs on, "rueidis" or "go-redis"
	// (empty in memory): ratios to the seed script and to the floors pair
	// contenders on the same client.
	Client string
	// Algorithm is the limitkit algorithm, empty for peers and floors.
	Algorithm algorithms.Name
	// Aligned marks a peer that counts per window aligned to the epoch, as
	// fixed_window does: its over-admissions are counted per aligned
	// window (a fixed window admits up to twice its limit across a
	// boundary, which a sliding count would report).
	Aligned bool
	// New sets the contender up for a workload and returns its decider and
	// a function releasing what New acquired.
	New func(w Workload) (Decider, func(), error)
}

// rng is a xorshift generator: each goroutine draws its key indexes from
// its own, without locks or allocations.
type rng uint64

func newRng(seed uint64) rng {
	// splitmix64 of the seed, never zero.
	z := seed + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return rng(z)
}

// index returns the next index in 0..n-1.
func (r *rng) index(n int) int {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	if n == 1 {
		return 0
	}
	return int(x % uint64(n))
}

// errorf is fmt.Errorf with the contender's name in front.
func errorf(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
}

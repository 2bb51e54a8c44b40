package algorithms

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRuleValidate(t *testing.T) {
	ok := Rule{Algorithm: SlidingLog, Limit: 10, Window: time.Second}
	require.NoError(t, ok.Validate())
	for _, name := range Names() {
		require.NoError(t, Rule{Algorithm: name, Limit: 1, Window: MaxWindow}.Validate())
	}
	require.NoError(t, Rule{Algorithm: FixedWindow, Limit: MaxFixedWindowLimit, Window: time.Millisecond}.Validate())
	require.Error(t, Rule{Algorithm: FixedWindow, Limit: MaxFixedWindowLimit + 1, Window: time.Millisecond}.Validate())
	require.NoError(t, Rule{Algorithm: SlidingCounter, Limit: MaxLimit, Window: time.Millisecond}.Validate())
	require.NoError(t, Rule{Algorithm: SlidingLog, Limit: MaxSlidingLogLimit, Window: time.Minute}.Validate())

	bad := map[string]Rule{
		"algorithm is empty":        {Limit: 1, Window: time.Second},
		`unknown algorithm "token"`: {Algorithm: "token", Limit: 1, Window: time.Second},
		"limit is 0":                {Algorithm: FixedWindow, Window: time.Second},
		"limit is -3":               {Algorithm: FixedWindow, Limit: -3, Window: time.Second},
		"above the maximum":         {Algorithm: SlidingCounter, Limit: MaxLimit + 1, Window: time.Second},
		"sliding_log maximum":       {Algorithm: SlidingLog, Limit: MaxSlidingLogLimit + 1, Window: time.Second},
		"window is 0s":              {Algorithm: FixedWindow, Limit: 1},
		"window is -1s":             {Algorithm: FixedWindow, Limit: 1, Window: -time.Second},
		"longer than the maximum":   {Algorithm: FixedWindow, Limit: 1, Window: MaxWindow + time.Millisecond},
		"whole number of millisec":  {Algorithm: FixedWindow, Limit: 1, Window: 1500 * time.Microsecond},
	}
	for want, r := range bad {
		err := r.Validate()
		require.ErrorIs(t, err, ErrInvalidRule, want)
		require.ErrorContains(t, err, want)
	}
}

func TestValidateCost(t *testing.T) {
	r := Rule{Algorithm: FixedWindow, Limit: 5, Window: time.Second}
	require.NoError(t, r.ValidateCost(1))
	require.NoError(t, r.ValidateCost(5))
	for _, c := range []int64{0, -1, 6} {
		require.ErrorIs(t, r.ValidateCost(c), ErrInvalidRequest)
	}
}

// exactLog is a brute-force sliding log: an unordered list of admitted
// timestamps, forgotten a window after they slid out.
type exactLog struct{ stamps []int64 }

func (x *exactLog) live(now, w int64) int64 {
	x.stamps = slices.DeleteFunc(x.stamps, func(t int64) bool { return t <= now-2*w })
	n := int64(0)
	for _, t := range x.stamps {
		if t > now-w {
			n++
		}
	}
	return n
}

// TestSlidingLogMatchesBruteForce runs random traffic, with the clock going
// back now and then, through the ring and through an unbounded list.
func TestSlidingLogMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		limit := int64(1 + rng.IntN(12))
		w := int64(5 + rng.IntN(60))
		r := Rule{Algorithm: SlidingLog, Limit: limit, Window: time.Duration(w) * time.Millisecond}
		var s State
		var x exactLog
		now := int64(1_000_000)
		for step := range 400 {
			switch p := rng.IntN(20); {
			case p == 0:
				now -= int64(rng.IntN(int(w)))
			case p < 8:
			default:
				now += int64(rng.IntN(int(w) / 2))
			}
			cost := int64(1 + rng.IntN(int(limit)))
			want := x.live(now, w)+cost <= limit
			out := r.Take(&s, now, cost)
			require.Equal(t, want, out.Allowed, "round %d step %d", round, step)
			if want {
				for range cost {
					x.stamps = append(x.stamps, now)
				}
			}
			require.Equal(t, max(limit-x.live(now, w), 0), out.Remaining, "round %d step %d", round, step)
			// Time-only retention: two windows, at most two limits.
			require.LessOrEqual(t, s.log.size(), 2*limit)
			require.LessOrEqual(t, s.log.capacity(), 2*limit)
		}
	}
}

// TestRetryAndResetAreExact checks, for every algorithm, that RetryAfter is
// the first millisecond at which the denied request is admitted and that
// ResetAfter is the first at which the key has its full allowance, by trying
// every millisecond on copies of the state.
func TestRetryAndResetAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range Names() {
		t.Run(string(name), func(t *testing.T) {
			checked := 0
			for round := range 40 {
				limit := int64(1 + rng.IntN(9))
				if round%5 == 0 {
					limit = int64(100_000 + rng.IntN(1_000_000))
				}
				w := int64(3 + rng.IntN(40))
				r := Rule{Algorithm: name, Limit: limit, Window: time.Duration(w) * time.Millisecond}
				if r.Validate() != nil {
					continue // a limit above what the logs or GCRA accept
				}
				var s State
				now := int64(w * 1000)
				for range 60 {
					if rng.IntN(10) == 0 {
						now -= int64(rng.IntN(int(w)))
					} else {
						now += int64(rng.IntN(int(w)))
					}
					cost := int64(1 + rng.IntN(int(min(limit, 9))))
					if limit > 1000 {
						cost = int64(1 + rng.IntN(int(limit/3)))
					}
					// A fixed window's request in the window before its
					// latest (the clock went back) is told its own window's
					// end, as the Redis stores' INCRBY reply tells, not the
					// later window's: its times are not checked here.
					back := r.PerWindow() && s.fixedWindow().start > now
					out := r.Take(&s, now, cost)
					if back {
						continue
					}
					if !out.Allowed {
						checked++
						firstAdmitted := int64(-1)
						for d := int64(1); d <= 10*w; d++ {
							c := s.Clone()
							if r.Take(&c, now+d, cost).Allowed {
								firstAdmitted = d
								break
							}
						}
						require.Equal(t, firstAdmitted, out.RetryAfter, "%v at %d cost %d", r, now, cost)
						peek := r.Peek(&s, now, cost)
						require.Equal(t, out, peek)
					} else {
						require.Zero(t, out.RetryAfter)
					}
					firstFree := int64(-1)
					for d := int64(0); d <= 10*w; d++ {
						if r.Peek(&s, now+d, 1).Remaining == limit {
							firstFree = d
							break
						}
					}
					require.Equal(t, firstFree, out.ResetAfter, "%v at %d: %+v state %+v", r, now, out, s)
				}
			}
			require.Greater(t, checked, 100, "too few denials to check")
		})
	}
}

// TestPeekDoesNotConsume checks Peek leaves the state as it was and agrees
// with what Take of cost 1 then does.
func TestPeekDoesNotConsume(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, name := range Names() {
		r := Rule{Algorithm: name, Limit: 4, Window: 20 * time.Millisecond}
		var s State
		now := int64(10_000)
		for range 500 {
			now += int64(rng.IntN(8))
			before := contents(&s)
			cost := int64(1 + rng.IntN(4))
			p := r.Peek(&s, now, cost)
			require.Equal(t, before, contents(&s), name)
			c := s.Clone()
			took := r.Take(&c, now, cost)
			require.Equal(t, took.Allowed, p.Allowed, name)
			require.Equal(t, took.RetryAfter, p.RetryAfter, name)
			if rng.IntN(2) == 0 {
				r.Take(&s, now, int64(1+rng.IntN(2)))
			}
		}
	}
}

// TestSlidingCounterNeverUndercounts compares the integer estimate with the
// exact rational previous*(w-e)/w + current, including limits near 2^53 and
// windows of a year, where a float64 product would lose digits.
// TestSlidingLogExactUnderDisorder delivers requests out of timestamp order
// (each stamped up to a jitter before it arrives) and checks, by timestamp,
// that no window ever holds more than the limit.
func TestSlidingLogExactUnderDisorder(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 30 {
		const limit, w, jitter = 5, 100, 60
		r := Rule{Algorithm: SlidingLog, Limit: limit, Window: w * time.Millisecond}
		var s State
		var admitted []int64
		arrival := int64(10_000)
		for range 500 {
			arrival += int64(rng.IntN(15))
			stamp := arrival - int64(rng.IntN(jitter))
			cost := int64(1 + rng.IntN(2))
			if r.Take(&s, stamp, cost).Allowed {
				for range cost {
					admitted = append(admitted, stamp)
				}
			}
		}
		from, n := busiestWindow(admitted, w)
		require.LessOrEqual(t, n, int64(limit), "round %d: window from %d holds %d", round, from, n)
	}
}

// busiestWindow sorts times and returns the window of w ms holding most of
// them: its first time and how many it holds. A window starting just before
// a time is the worst case, so only those are tried.
func busiestWindow(times []int64, w int64) (from, n int64) {
	slices.Sort(times)
	for i, j := 0, 0; i < len(times); i++ {
		for j < len(times) && times[j] < times[i]+w {
			j++
		}
		if int64(j-i) > n {
			from, n = times[i], int64(j-i)
		}
	}
	return from, n
}

func TestSlidingCounterNeverUndercounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	year := MaxWindow.Milliseconds()
	for range 20_000 {
		w := 1 + rng.Int64N(year)
		if rng.IntN(2) == 0 {
			w = year
		}
		prev := rng.Int64N(MaxLimit + 1)
		e := rng.Int64N(w)
		got := weighted(prev, e, w)
		exact := new(big.Rat).SetFrac(
			new(big.Int).Mul(big.NewInt(prev), big.NewInt(w-e)), big.NewInt(w))
		require.GreaterOrEqual(t, new(big.Rat).SetInt64(got).Cmp(exact), 0, "undercount prev=%d e=%d w=%d", prev, e, w)
		// Over by at most previous/weightScale + 1.
		slack := new(big.Rat).Add(exact, new(big.Rat).SetFrac64(prev+weightScale, weightScale))
		require.LessOrEqual(t, new(big.Rat).SetInt64(got).Cmp(slack), 0, "overcount prev=%d e=%d w=%d", prev, e, w)
		require.LessOrEqual(t, got, prev)
	}
}

func TestHugeLimitsAndWindows(t *testing.T) {
	for _, name := range []Name{SlidingCounter, FixedWindow} {
		r := Rule{Algorithm: name, Limit: r0(name).LimitBound(), Window: MaxWindow}
		require.NoError(t, r.Validate())
		var s State
		now := int64(1_800_000_000_000)
		out := r.Take(&s, now, r.Limit-1)
		require.True(t, out.Allowed)
		require.Equal(t, int64(1), out.Remaining)
		require.True(t, r.Take(&s, now, 1).Allowed)
		out = r.Take(&s, now, 1)
		require.False(t, out.Allowed)
		require.Positive(t, out.RetryAfter)
		require.LessOrEqual(t, out.RetryAfter, 2*MaxWindow.Milliseconds())
	}
}

// r0 is a rule of name with the largest window, for its LimitBound.
func r0(name Name) Rule { return Rule{Algorithm: name, Window: MaxWindow} }

func TestKeySuffixesDiffer(t *testing.T) {
	seen := map[string]Name{}
	salts := map[uint64]Name{}
	for _, name := range Names() {
		sfx := Rule{Algorithm: name}.KeySuffix()
		_, dup := seen[sfx]
		require.False(t, dup)
		seen[sfx] = name
		salt := Lookup(name).Salt
		require.NotContains(t, salts, salt, "%s shares its salt with %s", name, salts[salt])
		salts[salt] = name
	}
	require.True(t, errors.Is(Rule{}.Validate(), ErrInvalidRule))
}

// stateContents is a State with its log copied out: a ring is a pointer,
// which require.Equal would follow to its header but not to its slots.
type stateContents struct {
	start, current, previous int64
	log                      []int64
}

func contents(s *State) stateContents {
	c := stateContents{start: s.words[0], current: s.words[1], previous: s.words[2]}
	for i := range s.log.size() {
		c.log = append(c.log, s.log.at(i))
	}
	return c
}

func TestCloneSharesNothing(t *testing.T) {
	r := Rule{Algorithm: SlidingLog, Limit: 10, Window: time.Second}
	var s State
	for now := range int64(5) {
		r.Take(&s, now, 1)
	}
	c := s.Clone()
	require.Equal(t, contents(&s), contents(&c))
	r.Take(&c, 5, 3)
	require.Len(t, contents(&s).log, 5)
	require.Len(t, contents(&c).log, 8)
}

// TestCostAboveLimitRefused: Rule.Take and Peek of a cost above the limit,
// which stores refuse as invalid, are refusals on every algorithm, on an
// empty key and on one holding units; the logs indexed their ring by the
// cost (a read past it: run with -race, whose checkptr sees it).
func TestCostAboveLimitRefused(t *testing.T) {
	for _, a := range Algorithms() {
		r, err := NewRule(a.Name, 3, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, held := range []int64{0, 2, 3} {
			var s State
			now := int64(1_000_000)
			if held > 0 && !r.Take(&s, now, held).Allowed {
				t.Fatalf("%s: a take of %d refused", a.Name, held)
			}
			for _, cost := range []int64{4, 7, 1 << 40} {
				if out := r.Take(&s, now+1, cost); out.Allowed {
					t.Errorf("%s holding %d: Take of %d admitted: %+v", a.Name, held, cost, out)
				}
				if out := r.Peek(&s, now+1, cost); out.Allowed {
					t.Errorf("%s holding %d: Peek of %d admitted: %+v", a.Name, held, cost, out)
				}
			}
		}
	}
}

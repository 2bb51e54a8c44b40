package redisengine_test

// The logs' scripts, cut for speed, against their plain forms
// (testdata/plain_*.lua: the same steps written straightforwardly), on
// twin keys of one real redis-server: every reply field, the expiry each
// step sets and the stored state after each step must be the same.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// plainSteps is how many random steps TestCutScriptsMatchPlain drives:
// LIMITKIT_PLAIN_STEPS, else a count small enough for CI.
func plainSteps(t *testing.T) int {
	s := os.Getenv("LIMITKIT_PLAIN_STEPS")
	if s == "" {
		return 20_000
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "LIMITKIT_PLAIN_STEPS")
	return n
}

// cutAlgorithms are the algorithms whose scripts were cut: the two logs
// and two_level, which shares the compact log's library.
var cutAlgorithms = []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog, algorithms.TwoLevel}

// twinScript runs the script before and the script now, each on its own
// key, with the same ARGV (single.lua's), and returns for each its five
// values (or its error), the expiry it set last on its key in ms (-1: none
// set, -2: made persistent), then 1 when the two keys hold the same
// state, else 0 and the two states.
//
// Each script runs as a function whose redis is a proxy that records the
// expiries it sets and forwards every call; its text is unchanged.
func twinScript(before, now string) string {
	return `
local real = redis
local function proxy(key, rec)
  local p = {}
  local function note(...)
    local a = {...}
    if a[2] ~= key then
      return
    end
    local cmd = string.upper(a[1])
    if cmd == 'PEXPIRE' then
      rec.px = tonumber(a[3])
    elseif cmd == 'SET' then
      local px = -2
      for i = 4, #a do
        local o = string.upper(tostring(a[i]))
        if o == 'PX' then
          px = tonumber(a[i + 1])
        elseif o == 'KEEPTTL' then
          px = nil
        end
      end
      if px then
        rec.px = px
      end
    end
  end
  p.call = function(...)
    note(...)
    return real.call(...)
  end
  p.pcall = function(...)
    note(...)
    return real.pcall(...)
  end
  p.error_reply, p.status_reply = real.error_reply, real.status_reply
  return p
end
local function run_before(KEYS, ARGV, redis)
` + before + `
end
local function run_now(KEYS, ARGV, redis)
` + now + `
end
local function state(k)
  local t = real.call('TYPE', k)['ok']
  if t == 'zset' then
    return 'zset:' .. table.concat(real.call('ZRANGE', k, '0', '-1', 'WITHSCORES'), ',')
  elseif t == 'string' then
    return 'string:' .. real.call('GET', k)
  end
  return t
end
local reply, px = {}, {}
for i, f in ipairs({run_before, run_now}) do
  local rec = {px = -1}
  local ok, r = pcall(f, {KEYS[i]}, ARGV, proxy(KEYS[i], rec))
  px[i] = rec.px
  if ok and type(r) == 'table' and r.err then
    ok, r = false, r.err
  end
  if ok then
    reply[#reply + 1] = ''
    for j = 1, 5 do
      reply[#reply + 1] = r[j]
    end
  else
    reply[#reply + 1] = 'error: ' .. tostring(r)
    for j = 1, 5 do
      reply[#reply + 1] = 0
    end
  end
  reply[#reply + 1] = rec.px
end
-- The two expiries were set from the same px (when the step passes) but
-- at two moments of the server's clock: move the second to the first's
-- time, so that the twins expire together.
if px[1] == px[2] then
  local at = real.call('PEXPIRETIME', KEYS[1])
  if at > 0 and real.call('PEXPIRETIME', KEYS[2]) > 0 then
    real.call('PEXPIREAT', KEYS[2], at)
  end
end
local a, b = state(KEYS[1]), state(KEYS[2])
if a == b then
  reply[#reply + 1] = 1
else
  reply[#reply + 1] = 0
  reply[#reply + 1] = a
  reply[#reply + 1] = b
end
return reply
`
}

// twinStep is one step of the comparison.
type twinStep struct {
	what string
	id   int
	argv []any // single.lua's ARGV; nil for a reset
	take bool
	cost int64
}

// twinResult is what a twinScript reply says.
type twinResult struct {
	before, now []int64 // the five values
	errs        [2]string
	px          [2]int64
	same        bool
	states      [2]string
}

func parseTwin(v any) (twinResult, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) < 15 {
		return twinResult{}, fmt.Errorf("twin reply %v", v)
	}
	var r twinResult
	for side := range 2 {
		base := side * 7
		r.errs[side], _ = vals[base].(string)
		out := make([]int64, 5)
		for j := range 5 {
			out[j], _ = vals[base+1+j].(int64)
		}
		if side == 0 {
			r.before = out
		} else {
			r.now = out
		}
		r.px[side], _ = vals[base+6].(int64)
	}
	same, _ := vals[14].(int64)
	r.same = same == 1
	if !r.same && len(vals) >= 17 {
		r.states[0], _ = vals[15].(string)
		r.states[1], _ = vals[16].(string)
	}
	return r, nil
}

// comparePlainCut drives steps random steps of the named algorithm's
// scripts, before (text) and now (text), against twin keys and returns the
// first difference, or nil. Steps go 64 to a pipeline; a refund names an
// admission whose reply came back in an earlier pipeline.
func comparePlainCut(ctx context.Context, c *redis.Client, alg algorithms.Name, before, now string, seed uint64, steps int) error {
	sha, err := c.ScriptLoad(ctx, twinScript(before, now)).Result()
	if err != nil {
		return fmt.Errorf("loading the twin script: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 15))
	run := fmt.Sprintf("oldnew:%s:%d:%d:", alg, seed, time.Now().UnixNano())
	windows := []int64{1, 2, 7, 50, 1000, 1500, 3_600_000, algorithms.MaxWindow.Milliseconds()}
	limits := []int64{1, 2, 3, 4, 5, 7, 16, 17, 31, 32, 33, 40, 64, 100, 127, 128, 129, 300, 1000, 2000, algorithms.MaxSlidingLogLimit}
	starts := []int64{0, 1, 1_767_225_600_000, 1_767_225_600_000 + 123_457,
		rediswire.MaxTime - 2*algorithms.MaxWindow.Milliseconds()}
	var w, limit int64
	pick := func() {
		w = windows[rng.IntN(len(windows))]
		// Mostly small and middling limits, where most paths are; now and
		// then a large one.
		limit = limits[rng.IntN(len(limits)-3)]
		if rng.IntN(20) == 0 {
			limit = limits[len(limits)-3+rng.IntN(3)]
		}
	}
	type admission struct{ at, cost int64 }
	const pipe = 64
	done := 0
	for round := 0; done < steps; round++ {
		pick()
		keys := 1 + rng.IntN(6)
		taken := make([][]admission, keys)
		nowMs := starts[rng.IntN(len(starts))] + rng.Int64N(3*w+1)
		for left := 1 + rng.IntN(400); left > 0 && done < steps; {
			batch := make([]twinStep, 0, pipe)
			for len(batch) < pipe && left > 0 && done+len(batch) < steps {
				left--
				if rng.IntN(40) == 0 {
					pick()
				}
				nowMs = scripttest.WalkTime(rng, nowMs, w, 1+rng.Int64N(4))
				nowMs = min(max(nowMs, 0), rediswire.MaxTime-2*w)
				id := rng.IntN(keys)
				var cost int64
				switch p := rng.IntN(10); {
				case p < 5:
					cost = 1
				case p < 6:
					cost = limit
				case p < 7:
					cost = max(limit-1, 1)
				default:
					cost = 1 + rng.Int64N(min(limit, 64))
				}
				if cost > 64 && rng.IntN(4) != 0 {
					cost = 1 + rng.Int64N(64) // huge costs are slow; keep some
				}
				s := twinStep{id: id, cost: cost}
				base := []any{nowMs, w, limit, cost}
				switch p := rng.IntN(100); {
				case p < 2:
					s.what = "Reset"
					taken[id] = nil
				case p < 17 && len(taken[id]) > 0:
					i := len(taken[id]) - 1
					if rng.IntN(3) == 0 {
						i = rng.IntN(len(taken[id]))
					}
					a := taken[id][i]
					taken[id] = append(taken[id][:i], taken[id][i+1:]...)
					s.what, s.cost = fmt.Sprintf("Refund(at %d)", a.at), min(a.cost, limit)
					s.argv = []any{nowMs, w, limit, s.cost, "2", a.at}
				case p < 35:
					s.what = "Peek"
					s.argv = append(base, "0")
				default:
					s.what, s.take = "Take", true
					s.argv = append(base, "1")
				}
				batch = append(batch, s)
			}
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, s := range batch {
					k0 := fmt.Sprintf("%s%d:%d:before", run, round, s.id)
					k1 := fmt.Sprintf("%s%d:%d:now", run, round, s.id)
					if s.argv == nil {
						p.Del(ctx, k0, k1)
						continue
					}
					p.EvalSha(ctx, sha, []string{k0, k1}, s.argv...)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("pipeline: %w", err)
			}
			for i, s := range batch {
				done++
				if s.argv == nil {
					continue
				}
				r, err := parseTwin(cmds[i].(*redis.Cmd).Val())
				what := fmt.Sprintf("%s step %d (round %d, key %d): %s ARGV %v", alg, done, round, s.id, s.what, s.argv)
				if err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				if r.errs != [2]string{} || fmt.Sprint(r.before) != fmt.Sprint(r.now) {
					return fmt.Errorf("%s: before %v %q, now %v %q", what, r.before, r.errs[0], r.now, r.errs[1])
				}
				if r.px[0] != r.px[1] {
					return fmt.Errorf("%s: expiry set before %d ms, now %d ms", what, r.px[0], r.px[1])
				}
				if !r.same {
					return fmt.Errorf("%s: states differ\nbefore %.300q\nnow    %.300q", what, r.states[0], r.states[1])
				}
				if s.take && r.now[rediswire.ReplyAllowed] == 1 {
					taken[s.id] = append(taken[s.id], admission{r.now[rediswire.ReplyAt], s.cost})
				}
			}
		}
	}
	return nil
}

// TestCutScriptsMatchPlain compares each cut script with its plain form
// (testdata) on twin keys: LIMITKIT_PLAIN_STEPS steps in all (20,000
// by default; the report ran 1,000,000). Random keys, costs, clock steps
// (jumping back as well as forward), limits and windows changing under the
// keys, peeks, refunds and resets. It also shows the comparison catches a
// script that differs: in one decision's field, or only in the expiry it
// sets.
func TestCutScriptsMatchPlain(t *testing.T) {
	// Parallel: CPU-bound, on a server of its own, and it sets none of
	// export_test.go's controls (the serial tests that do end first).
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	steps := plainSteps(t)
	for i, alg := range cutAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			before, err := plainScript(alg)
			require.NoError(t, err)
			now, err := rediswire.Script(alg)
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, comparePlainCut(t.Context(), c, alg, before, now, uint64(1000+i), steps/len(cutAlgorithms)))
			t.Logf("%s: %d steps identical in %v", alg, steps/len(cutAlgorithms), time.Since(start).Round(time.Millisecond))
		})
	}
	t.Run("control", func(t *testing.T) {
		// Each change to a script must be caught within the default step
		// count.
		mutations := []struct {
			alg       algorithms.Name
			from, to  string
			wantError string
		}{
			// A denial reports a retry one ms late.
			{algorithms.SlidingLog, "retry = t[first - 1 + kept + cost - limit] + w - now", "retry = t[first - 1 + kept + cost - limit] + w - now + 1", ""},
			// Keys kept one ms longer: only the expiry differs.
			{algorithms.CompactLog, "return reset + 1 * w + 1000", "return reset + 1 * w + 1001", "expiry set"},
		}
		for _, m := range mutations {
			before, err := plainScript(m.alg)
			require.NoError(t, err)
			now, err := rediswire.Script(m.alg)
			require.NoError(t, err)
			require.Contains(t, now, m.from, "the control's mutation no longer applies")
			err = comparePlainCut(t.Context(), c, m.alg, before, strings.Replace(now, m.from, m.to, 1), 7, 20_000)
			require.Error(t, err, "%s: a script changed by %q was not caught", m.alg, m.to)
			require.Contains(t, err.Error(), m.wantError)
			t.Logf("caught: %v", err)
		}
	})
}

// plainParts lists, per algorithm, the testdata files whose text, joined,
// is its plain script: the prelude every script starts
// with, the log library the two log scripts shared, then its own body.
var plainParts = map[algorithms.Name][]string{
	algorithms.SlidingLog: {"prelude", "sliding_log"},
	algorithms.CompactLog: {"prelude", "loglib", "compact_log"},
	algorithms.TwoLevel:   {"prelude", "loglib", "two_level"},
}

// plainScript returns alg's plain script.
func plainScript(alg algorithms.Name) (string, error) {
	parts, ok := plainParts[alg]
	if !ok {
		return "", fmt.Errorf("no plain script for %s", alg)
	}
	var b strings.Builder
	for _, p := range parts {
		text, err := os.ReadFile("testdata/plain_" + p + ".lua")
		if err != nil {
			return "", err
		}
		b.Write(text)
	}
	return b.String(), nil
}

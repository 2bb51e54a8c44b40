package redisengine_test

// Every script, run on a real redis-server under a prelude that checks
// two portability rules as it runs: each key a command touches was passed
// in KEYS (Dragonfly refuses undeclared keys by default, a Cluster cannot
// route them), and nothing calls a function Lua 5.4 has not (Dragonfly and
// other Lua 5.4 servers): the prelude hides unpack, setfenv, getfenv,
// loadstring, module, gcinfo, table.getn/setn/maxn, math.pow/mod/ldexp/
// frexp/cosh/sinh/tanh/log10 and string.gfind, and gives table.unpack.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// portablePrelude goes before a script: it shadows redis (call and pcall
// check their keys against KEYS first) and the libraries (Lua 5.4's).
// Commands are listed with where their keys are; one not listed is an
// error, so a new command is looked at.
const portablePrelude = `
local limitkit_unpack = table.unpack or unpack
local limitkit_declared = {}
for _, k in ipairs(KEYS) do limitkit_declared[k] = true end
local limitkit_keys = {TIME = 0, GET = 1, SET = 1, INCRBY = 1, DECRBY = 1, PEXPIRE = 1,
  GETRANGE = 1, SETRANGE = 1, ZADD = 1, ZCARD = 1, ZCOUNT = 1, ZRANGE = 1, ZRANGEBYSCORE = 1,
  ZREM = 1, ZREMRANGEBYRANK = 1, ZREMRANGEBYSCORE = 1, ZSCORE = 1, DEL = -1, EXISTS = -1, PTTL = 1}
local function limitkit_check(cmd, ...)
  local n = limitkit_keys[string.upper(cmd)]
  if n == nil then
    error('limitkit check: command ' .. cmd .. ' not listed')
  end
  if n < 0 then
    n = select('#', ...)
  end
  for i = 1, n do
    local k = select(i, ...)
    if not limitkit_declared[k] then
      error('limitkit check: undeclared key ' .. tostring(k) .. ' in ' .. cmd)
    end
  end
end
local limitkit_redis = redis
local redis = setmetatable({
  call = function(cmd, ...) limitkit_check(cmd, ...) return limitkit_redis.call(cmd, ...) end,
  pcall = function(cmd, ...) limitkit_check(cmd, ...) return limitkit_redis.pcall(cmd, ...) end,
}, {__index = limitkit_redis})
local unpack, setfenv, getfenv, loadstring, module, gcinfo = nil, nil, nil, nil, nil, nil
local table = {insert = table.insert, remove = table.remove, concat = table.concat, sort = table.sort, unpack = limitkit_unpack}
local math = (function()
  local m = {}
  for k, v in pairs(math) do m[k] = v end
  for _, k in ipairs({'pow', 'mod', 'ldexp', 'frexp', 'cosh', 'sinh', 'tanh', 'log10'}) do m[k] = nil end
  return m
end)()
local string = (function()
  local s = {}
  for k, v in pairs(string) do s[k] = v end
  s.gfind = nil
  return s
end)()
`

// checked runs src under portablePrelude with keys and args and returns
// Redis' error text ("" when it ran).
func checked(t *testing.T, srv *redistest.Server, src string, keys, args []string) string {
	t.Helper()
	cmd := append([]string{"EVAL", portablePrelude + src, strconv.Itoa(len(keys))}, keys...)
	_, err := srv.Do(append(cmd, args...)...)
	if err != nil {
		return err.Error()
	}
	return ""
}

// scriptCall is one call of a script: its name, source, KEYS and ARGV.
type scriptCall struct {
	name, src  string
	keys, args []string
}

// portableCalls returns calls that reach every script and every mode of
// every algorithm's step on fresh keys under prefix: single-request
// scripts (take, peek, refund, and renew where leases are held), with the
// client's time and the server's, the TakeAll scripts, both batches and
// the groups, and the plain scripts of testdata. Fixed windows are called
// with an exact key (backend.ExactKey, as limitkit-rls names them); their
// library keys are in TestScriptsDeclareTheirKeys.
func portableCalls(t *testing.T, prefix string) []scriptCall {
	now := time.Now().UnixMilli()
	var calls []scriptCall
	rules := map[algorithms.Name]algorithms.Rule{}
	for _, name := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: name, Limit: 10, Window: time.Minute}
		rules[name] = rule
		src, err := rediswire.Script(name)
		require.NoError(t, err)
		key := prefix + "{" + string(name) + "}" + rule.KeySuffix()
		if name == algorithms.FixedWindow {
			key = prefix + "{fw}exact_" + strconv.FormatInt(now-now%rule.Window.Milliseconds(), 10)
		}
		for _, at := range []int64{now, rediswire.ServerTime} {
			for _, mode := range []rediswire.Mode{rediswire.ModeTake, rediswire.ModePeek} {
				args, err := rediswire.Args(rule, at, 1, mode)
				require.NoError(t, err)
				calls = append(calls, scriptCall{string(name) + " " + strconv.Itoa(int(mode)), src, []string{key}, args})
			}
		}
		calls = append(calls, scriptCall{string(name) + " refund", src, []string{key}, rediswire.RefundArgs(rule, now, now, 1)},
			scriptCall{string(name) + " give back", src, []string{key}, rediswire.RefundArgs(rule, now, -1, 1)})
		if name == algorithms.Concurrency {
			calls = append(calls, scriptCall{string(name) + " renew", src, []string{key}, rediswire.RenewArgs(rule, now, 1, 1)})
		}
		if p, err := plainScript(name); err == nil {
			args, err := rediswire.Args(rule, now, 1, rediswire.ModeTake)
			require.NoError(t, err)
			calls = append(calls, scriptCall{"plain " + string(name), p, []string{prefix + "{plain" + string(name) + "}" + rule.KeySuffix()}, args})
		}
	}
	// The scripts of several requests, over two of them.
	two := []algorithms.Name{algorithms.SlidingLog, algorithms.GCRA}
	keys := []string{prefix + "{m1}" + rules[two[0]].KeySuffix(), prefix + "{m2}" + rules[two[1]].KeySuffix()}
	multi := []string{strconv.FormatInt(now, 10)}
	var batch []string
	var buf []byte
	for _, n := range two {
		multi = rediswire.MultiArgs(multi, rules[n], 1)
		batch, buf = rediswire.BatchArgs(batch, buf, rules[n], now, 1)
	}
	groups := append([]string{"2"}, multi...)
	calls = append(calls, scriptCall{"multi", rediswire.MultiScript(), keys, multi},
		scriptCall{"batch", rediswire.BatchScript(), keys, batch},
		scriptCall{"peek batch", rediswire.PeekBatchScript(), keys, batch},
		scriptCall{"groups", rediswire.GroupsScript(), keys, groups})
	return calls
}

// TestScriptsDeclareTheirKeys: every script, in every mode, touches only
// keys passed in KEYS and runs without the functions Lua 5.4 removed. A
// fixed window's library key (its ':fw' suffix) is called with the key of
// its window (rediswire.StateKey, RefundKey: issue 43, item 13), in every
// mode; called with the library key itself, as before, the script names
// its window's key inside, which the check catches (a control that it
// sees an undeclared key a real script builds). That remains under server
// time only (the window is the server's; docs/redis.md says so). The
// other controls: a script that touches an undeclared key, and one for
// each function missing from Lua 5.4 (and concurrency.lua without its
// local unpack), fail the check, and a declared key passes it.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	prefix := "portable:"
	for _, c := range portableCalls(t, prefix) {
		require.Empty(t, checked(t, srv, c.src, c.keys, c.args), "%s", c.name)
	}

	fw := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute}
	src, err := rediswire.Script(fw.Algorithm)
	require.NoError(t, err)
	now := time.Now()
	req := backend.Request{Key: backend.Key{Prefix: prefix, ID: "lib"}, Rule: fw, Now: now, Cost: 1}
	ms := now.UnixMilli()
	for _, mode := range []rediswire.Mode{rediswire.ModeTake, rediswire.ModePeek} {
		args, err := rediswire.Args(fw, ms, 1, mode)
		require.NoError(t, err)
		require.Empty(t, checked(t, srv, src, []string{rediswire.StateKey(&req)}, args), "a fixed window's library key, mode %d", mode)
	}
	// A refund of this window and of the one before, and a give back.
	start := ms - ms%fw.Window.Milliseconds()
	for _, at := range []int64{start, start - fw.Window.Milliseconds()} {
		require.Empty(t, checked(t, srv, src, []string{rediswire.RefundKey(&req, at)}, rediswire.RefundArgs(fw, ms, at, 1)), "refund at %d", at)
	}
	require.Empty(t, checked(t, srv, src, []string{rediswire.StateKey(&req)}, rediswire.RefundArgs(fw, ms, -1, 1)), "give back")
	args, err := rediswire.Args(fw, ms, 1, rediswire.ModeTake)
	require.NoError(t, err)
	library := rediswire.Key(req.Key, fw)
	require.Contains(t, checked(t, srv, src, []string{library}, args), "undeclared key",
		"control: the library key itself (as the script was called before, and still is under server time): the check no longer sees its per-window key")
	args, err = rediswire.Args(fw, rediswire.ServerTime, 1, rediswire.ModeTake)
	require.NoError(t, err)
	require.Contains(t, checked(t, srv, src, []string{library}, args), "undeclared key",
		"server time: the script no longer names its window's key (fixed? then drop this exception and the docs')")

	require.Empty(t, checked(t, srv, "return redis.call('INCRBY', KEYS[1], 1)", []string{"declared"}, nil), "control: a declared key")
	for src, want := range map[string]string{
		"return redis.call('GET', 'other')":            "undeclared key",
		"return redis.pcall('SET', KEYS[1] .. 'x', 1)": "undeclared key",
		"return redis.call('FLUSHALL')":                "not listed",
		"return unpack({1})":                           "unpack",
		"return table.getn({1})":                       "getn",
		"return math.pow(2, 3)":                        "pow",
		"setfenv(1, {})":                               "setfenv",
		"return loadstring('return 1')()":              "loadstring",
	} {
		require.Contains(t, checked(t, srv, src, []string{"declared"}, nil), want, "control %q passed the check", src)
	}
	// A real script without its local unpack (as concurrency.lua was):
	// the check finds the global one missing.
	cc := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 10, Window: time.Minute}
	src, err = rediswire.Script(cc.Algorithm)
	require.NoError(t, err)
	const decl = "local unpack = table.unpack or unpack"
	require.Contains(t, src, decl)
	args, err = rediswire.Args(cc, time.Now().UnixMilli(), 1, rediswire.ModeTake)
	require.NoError(t, err)
	require.Contains(t, checked(t, srv, strings.Replace(src, decl, "", 1), []string{prefix + "{cc}" + cc.KeySuffix()}, args), "unpack",
		"control: concurrency.lua calling the global unpack passed the check")
}

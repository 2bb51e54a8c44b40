package benchmarks

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// SeedScript is the seed article's rate limiter: the classic exact sliding
// log as one Lua script. It drops the entries older than the window, counts
// the rest and, below the limit, adds the request under a unique member and
// renews the key's expiry: 2 Redis calls per denial, 4 per admission.
//
// KEYS[1] is the log; ARGV is now (ms), the window (ms), the limit and the
// member. It returns 1 when the request is admitted, 0 when denied.
const SeedScript = `local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return 1
end
return 0`

// seedKey is the seed script's key for id, hash-tagged like limitkit's.
func seedKey(id string) string { return "seed:{" + id + "}" }

// seedArgs holds what every call of the seed script shares for one
// workload, and hands out unique members.
type seedArgs struct {
	window, limit string
	member        atomic.Uint64
}

// newSeedArgs uses the limit of limitkit's sliding_log under w, so that the
// script decides exactly as limitkit's exact log does.
func newSeedArgs(w Workload) *seedArgs {
	r := w.Rule(algorithms.SlidingLog)
	return &seedArgs{window: strconv.FormatInt(r.Window.Milliseconds(), 10), limit: strconv.FormatInt(r.Limit, 10)}
}

// args returns the ARGV of one call at now; the member is a process-wide
// sequence number, unique in the log as the article's random member is.
func (a *seedArgs) args(now int64) []string {
	return []string{strconv.FormatInt(now, 10), a.window, a.limit, strconv.FormatUint(a.member.Add(1), 36)}
}

// seedRueidis runs SeedScript through rueidis.NewLuaScript: EVALSHA,
// auto-pipelined with other callers' commands, EVAL when the script is not
// loaded yet.
func seedRueidis(addr string, w Workload) (Decider, func(), error) {
	c, err := rueidis.NewClient(harness.RueidisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	script := rueidis.NewLuaScript(SeedScript)
	a := newSeedArgs(w)
	return func(ctx context.Context, id string) (bool, error) {
		n, err := script.Exec(ctx, c, []string{seedKey(id)}, a.args(nowMillis())).AsInt64()
		return n == 1, err
	}, c.Close, nil
}

// seedGoRedis runs SeedScript through go-redis' redis.NewScript (EVALSHA,
// EVAL on NOSCRIPT) on a client with the default pool.
func seedGoRedis(addr string, w Workload) (Decider, func(), error) {
	return goRedisScript(addr, w, SeedScript)
}

// goRedisScript runs src, which takes the seed script's KEYS and ARGV,
// through go-redis as seedGoRedis does.
func goRedisScript(addr string, w Workload, src string) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	script := redis.NewScript(src)
	a := newSeedArgs(w)
	return func(ctx context.Context, id string) (bool, error) {
		args := a.args(nowMillis())
		n, err := script.Run(ctx, c, []string{seedKey(id)}, args[0], args[1], args[2], args[3]).Int64()
		return n == 1, err
	}, func() { _ = c.Close() }, nil
}

// nowMillis is the client's clock in ms, as the article's callers read it.
func nowMillis() int64 { return time.Now().UnixMilli() }

package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	uleredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// Names of the contenders the comparison's ratios refer to.
const (
	RedisRate    = "go-redis/redis_rate"
	UluleRedis   = "ulule/limiter redis"
	SeedRueidis  = "seed script rueidis"
	SeedGoRedis  = "seed script go-redis"
	FloorRueidis = "floor rueidis EVALSHA " + TrivialScript
	FloorGoRedis = "floor go-redis EVALSHA " + TrivialScript
)

// TrivialScript is the script of the EVALSHA floor: the cheapest script
// call there is.
const TrivialScript = "return 1"

// RedisContenders lists the contenders that keep state in the Redis server
// at addr: limitkit's go-redis and rueidis stores for each algorithm in
// algorithms.Names, the peers with Redis stores, the seed article's script
// (SeedScript) on each client, floors (INCR and the trivial script through
// each client), and in Group "experiment" client settings other than the
// defaults. Each New opens its
// own client and its release closes it.
func RedisContenders(addr string) []Contender {
	var cs []Contender
	for _, alg := range algorithms.Names() {
		cs = append(cs,
			Contender{Name: "limitkit rueidis " + string(alg), Group: "limitkit", Client: "rueidis", Algorithm: alg,
				New: func(w Workload) (Decider, func(), error) { return limitkitRueidis(addr, w, alg) }},
			Contender{Name: "limitkit go-redis " + string(alg), Group: "limitkit", Client: "go-redis", Algorithm: alg,
				New: func(w Workload) (Decider, func(), error) { return limitkitGoRedis(addr, w, alg) }},
		)
	}
	return append(cs,
		Contender{Name: RedisRate, Group: "peer", Client: "go-redis", New: func(w Workload) (Decider, func(), error) { return redisRate(addr, w) }},
		Contender{Name: UluleRedis, Group: "peer", Client: "go-redis", New: func(w Workload) (Decider, func(), error) { return ululeRedis(addr, w) }},
		Contender{Name: "throttled goredisstore.v9", Group: "peer", Client: "go-redis", New: func(w Workload) (Decider, func(), error) { return throttledRedis(addr, w) }},
		Contender{Name: ReferenceRueidis, Group: "peer", Client: "rueidis", Aligned: true, New: func(w Workload) (Decider, func(), error) { return referenceRueidis(addr, w) }},
		Contender{Name: ReferenceGoRedis, Group: "peer", Client: "go-redis", Aligned: true, New: func(w Workload) (Decider, func(), error) { return referenceGoRedis(addr, w) }},
		Contender{Name: SeedRueidis, Group: "seed", Client: "rueidis",
			New: func(w Workload) (Decider, func(), error) { return seedRueidis(addr, w) }},
		Contender{Name: SeedGoRedis, Group: "seed", Client: "go-redis",
			New: func(w Workload) (Decider, func(), error) { return seedGoRedis(addr, w) }},
		Contender{Name: "floor rueidis INCR", Group: "floor", Client: "rueidis", New: func(Workload) (Decider, func(), error) { return rueidisFloor(addr, false) }},
		Contender{Name: FloorRueidis, Group: "floor", Client: "rueidis", New: func(Workload) (Decider, func(), error) { return rueidisFloor(addr, true) }},
		Contender{Name: "floor go-redis INCR", Group: "floor", Client: "go-redis", New: func(Workload) (Decider, func(), error) { return goRedisFloor(addr, false) }},
		Contender{Name: FloorGoRedis, Group: "floor", Client: "go-redis", New: func(Workload) (Decider, func(), error) { return goRedisFloor(addr, true) }},
		Contender{Name: "limitkit rueidis sliding_log + denycache", Group: "limitkit", Client: "rueidis", Algorithm: algorithms.SlidingLog,
			New: func(w Workload) (Decider, func(), error) {
				return limitkitDenyCacheRueidis(addr, w, algorithms.SlidingLog)
			}},
		Contender{Name: "limitkit go-redis sliding_log + denycache", Group: "limitkit", Client: "go-redis", Algorithm: algorithms.SlidingLog,
			New: func(w Workload) (Decider, func(), error) {
				return limitkitDenyCacheGoRedis(addr, w, algorithms.SlidingLog)
			}},
		Contender{Name: "limitkit rueidis sliding_log, unbatched", Group: "experiment", Client: "rueidis", Algorithm: algorithms.SlidingLog,
			New: func(w Workload) (Decider, func(), error) {
				return limitkitRueidisWith(harness.RueidisOptions(addr), w, algorithms.SlidingLog, rueidisstore.WithBatching(1))
			}},
		Contender{Name: "limitkit go-redis sliding_log, unbatched", Group: "experiment", Client: "go-redis", Algorithm: algorithms.SlidingLog,
			New: func(w Workload) (Decider, func(), error) {
				return limitkitGoRedisWith(harness.GoRedisOptions(addr), w, algorithms.SlidingLog, goredisstore.WithBatching(1))
			}},
		Contender{Name: "go-redis/redis_rate, PoolSize 64", Group: "experiment", Client: "go-redis",
			New: func(w Workload) (Decider, func(), error) {
				o := harness.GoRedisOptions(addr)
				o.PoolSize = 64
				return redisRateWith(o, w)
			}},
	)
}

// storeDecider decides through a limitkit store, stamping each request
// with clock.System as limiter.Limiter does.
func storeDecider(s backend.Store, w Workload, alg algorithms.Name) Decider {
	rule := w.Rule(alg)
	if rule.HoldsLeases() {
		return leaseDecider(s, w, rule)
	}
	return func(ctx context.Context, id string) (bool, error) {
		res, err := s.Take(ctx, backend.Request{Key: backend.Key{Prefix: "bench:", ID: id}, Rule: rule, Now: clock.System.Now(), Cost: 1})
		return res.Allowed, err
	}
}

// leaseDecider decides for an algorithm that holds leases (concurrency).
// Never-deny, a decision is a lease's whole life, acquired then released
// (two store calls), as a service holding a slot for a request does.
// Deny-heavy, leases are acquired and kept until they expire, so a key
// holds its limit and further acquires are denied.
func leaseDecider(s backend.Store, w Workload, rule algorithms.Rule) Decider {
	ls, ok := s.(backend.LeaseStore)
	return func(ctx context.Context, id string) (bool, error) {
		if !ok {
			return false, fmt.Errorf("store %T holds no leases", s)
		}
		req := backend.Request{Key: backend.Key{Prefix: "bench:", ID: id}, Rule: rule, Now: clock.System.Now(), Cost: 1}
		res, err := ls.Take(ctx, req)
		if err != nil || !res.Allowed || w.Deny {
			return res.Allowed, err
		}
		req.Now = clock.System.Now()
		_, err = ls.Release(ctx, req, res.Lease)
		return true, err
	}
}

func limitkitRueidis(addr string, w Workload, alg algorithms.Name) (Decider, func(), error) {
	return limitkitRueidisWith(harness.RueidisOptions(addr), w, alg)
}

func limitkitRueidisWith(o rueidis.ClientOption, w Workload, alg algorithms.Name, opts ...rueidisstore.Option) (Decider, func(), error) {
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, nil, err
	}
	s, err := rueidisstore.New(c, opts...)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return storeDecider(s, w, alg), c.Close, nil
}

func limitkitGoRedis(addr string, w Workload, alg algorithms.Name) (Decider, func(), error) {
	return limitkitGoRedisWith(harness.GoRedisOptions(addr), w, alg)
}

func limitkitGoRedisWith(o *redis.Options, w Workload, alg algorithms.Name, opts ...goredisstore.Option) (Decider, func(), error) {
	c, err := harness.NewGoRedis(o)
	if err != nil {
		return nil, nil, err
	}
	s, err := goredisstore.New(c, opts...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return storeDecider(s, w, alg), func() { _ = c.Close() }, nil
}

// limitkitDenyCacheRueidis is the rueidis store behind a deny cache
// (backend/denycache) invalidated over the same client's pub/sub.
func limitkitDenyCacheRueidis(addr string, w Workload, alg algorithms.Name) (Decider, func(), error) {
	c, err := rueidis.NewClient(harness.RueidisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	s, err := rueidisstore.New(c)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return cachedDecider(s, rueidisstore.NewBus(c), w, alg, c.Close)
}

// limitkitDenyCacheGoRedis is limitkitDenyCacheRueidis on go-redis.
func limitkitDenyCacheGoRedis(addr string, w Workload, alg algorithms.Name) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	s, err := goredisstore.New(c)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return cachedDecider(s, goredisstore.NewBus(c), w, alg, func() { _ = c.Close() })
}

// cachedDecider puts a deny cache over s and waits until it answers.
func cachedDecider(s backend.Store, bus denycache.Bus, w Workload, alg algorithms.Name, closeClient func()) (Decider, func(), error) {
	cache, err := denycache.New(s, bus)
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cache.Ready(ctx); err != nil {
		_ = cache.Close()
		closeClient()
		return nil, nil, err
	}
	return storeDecider(cache, w, alg), func() { _ = cache.Close(); closeClient() }, nil
}

func redisRate(addr string, w Workload) (Decider, func(), error) {
	return redisRateWith(harness.GoRedisOptions(addr), w)
}

func redisRateWith(o *redis.Options, w Workload) (Decider, func(), error) {
	c, err := harness.NewGoRedis(o)
	if err != nil {
		return nil, nil, err
	}
	l := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: NeverDenyRate, Burst: NeverDenyRate, Period: time.Second}
	if w.Deny {
		l, win := w.DenyRule()
		limit = redis_rate.Limit{Rate: int(l), Burst: int(l), Period: win}
	}
	return func(ctx context.Context, id string) (bool, error) {
		res, err := l.Allow(ctx, id, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() { _ = c.Close() }, nil
}

func ululeRedis(addr string, w Workload) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	s, err := uleredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return ululeDecider(ulule.New(s, ululeRate(w))), func() { _ = c.Close() }, nil
}

func throttledRedis(addr string, w Workload) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	st, err := throttledredis.NewCtx(c, "throttled:")
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(w))
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return throttledDecider(l), func() { _ = c.Close() }, nil
}

// floorKey is the key a floor touches for id, hash-tagged like limitkit's.
func floorKey(id string) string { return "floor:{" + id + "}" }

func rueidisFloor(addr string, script bool) (Decider, func(), error) {
	c, err := rueidis.NewClient(harness.RueidisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	if !script {
		return func(ctx context.Context, id string) (bool, error) {
			return true, c.Do(ctx, c.B().Incr().Key(floorKey(id)).Build()).Error()
		}, c.Close, nil
	}
	sha, err := c.Do(context.Background(), c.B().ScriptLoad().Script(TrivialScript).Build()).ToString()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, id string) (bool, error) {
		return true, c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(floorKey(id)).Build()).Error()
	}, c.Close, nil
}

func goRedisFloor(addr string, script bool) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	if !script {
		return func(ctx context.Context, id string) (bool, error) {
			return true, c.Incr(ctx, floorKey(id)).Err()
		}, func() { _ = c.Close() }, nil
	}
	sha, err := c.ScriptLoad(context.Background(), TrivialScript).Result()
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, id string) (bool, error) {
		return true, c.EvalSha(ctx, sha, []string{floorKey(id)}).Err()
	}, func() { _ = c.Close() }, nil
}

// The names of envoyproxy/ratelimit's algorithm (src/redis/fixed_cache_impl.go)
// on each client: a fixed window, one INCRBY and one EXPIRE per decision in
// one pipeline, the same algorithm as limitkit's fixed_window on Redis.
const (
	ReferenceRueidis = "envoy ratelimit rueidis INCRBY+EXPIRE"
	ReferenceGoRedis = "envoy ratelimit go-redis INCRBY+EXPIRE"
)

// referenceWindow returns the workload's fixed window as the reference
// counts it: its limit and its length in whole seconds.
func referenceWindow(w Workload) (int64, int64) {
	if w.Deny {
		l, win := w.DenyRule()
		return l, int64(win / time.Second)
	}
	return NeverDenyLimit, int64(NeverDenyWindow / time.Second)
}

// referenceKey is the reference's key for id in the window holding now
// (its domain, the entry, the window's start in seconds).
func referenceKey(id string, now, divider int64) string {
	return "reference_user_" + id + "_" + strconv.FormatInt(now/divider*divider, 10)
}

func referenceRueidis(addr string, w Workload) (Decider, func(), error) {
	c, err := rueidis.NewClient(harness.RueidisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	limit, divider := referenceWindow(w)
	return func(ctx context.Context, id string) (bool, error) {
		k := referenceKey(id, time.Now().Unix(), divider)
		res := c.DoMulti(ctx, c.B().Incrby().Key(k).Increment(1).Build(), c.B().Expire().Key(k).Seconds(divider).Build())
		n, err := res[0].AsInt64()
		if err != nil {
			return false, err
		}
		return n <= limit, res[1].Error()
	}, c.Close, nil
}

func referenceGoRedis(addr string, w Workload) (Decider, func(), error) {
	c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
	if err != nil {
		return nil, nil, err
	}
	limit, divider := referenceWindow(w)
	return func(ctx context.Context, id string) (bool, error) {
		k := referenceKey(id, time.Now().Unix(), divider)
		var incr *redis.IntCmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			incr = p.IncrBy(ctx, k, 1)
			p.Expire(ctx, k, time.Duration(divider)*time.Second)
			return nil
		})
		if err != nil {
			return false, err
		}
		return incr.Val() <= limit, nil
	}, func() { _ = c.Close() }, nil
}

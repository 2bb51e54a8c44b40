package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// GoRedisOptions returns the go-redis client options every go-redis based
// contender uses: the library's defaults (so a pool of 10 connections per
// GOMAXPROCS), as most services run it.
func GoRedisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr}
}

// RueidisOptions returns the rueidis client options of the rueidis based
// contenders: the defaults (auto-pipelining on), client-side caching off.
func RueidisOptions(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}
}

// NewGoRedis opens a go-redis client and dials its whole pool (PoolSize
// connections, each held while the next is dialled so none is reused)
// before returning it: a cell measures a client whose pool is full, as a
// service's is at steady state, not one still dialling.
func NewGoRedis(o *redis.Options) (*redis.Client, error) {
	c := redis.NewClient(o)
	size := c.Options().PoolSize
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := make([]*redis.Conn, 0, size)
	var err error
	for range size {
		cn := c.Conn()
		conns = append(conns, cn)
		if err = cn.Ping(ctx).Err(); err != nil {
			break
		}
	}
	for _, cn := range conns {
		_ = cn.Close() // back to the pool
	}
	if err == nil {
		if n := int(c.PoolStats().TotalConns); n < size {
			err = fmt.Errorf("pool holds %d connections after dialling %d", n, size)
		}
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("filling the go-redis pool: %w", err)
	}
	return c, nil
}

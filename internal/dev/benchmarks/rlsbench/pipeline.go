package rlsbench

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// counter runs, in one round trip, an INCRBY and an EXPIRE per key (the
// reference server's pipeline) and returns each key's count after it.
type counter interface {
	incrExpire(ctx context.Context, keys []string, hits []uint64, expire []int64) ([]uint64, error)
}

type goRedisCounter struct{ c *redis.Client }

func (g goRedisCounter) incrExpire(ctx context.Context, keys []string, hits []uint64, expire []int64) ([]uint64, error) {
	incrs := make([]*redis.IntCmd, len(keys))
	_, err := g.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			incrs[i] = p.IncrBy(ctx, k, int64(hits[i]))
			p.Expire(ctx, k, time.Duration(expire[i])*time.Second)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(keys))
	for i, c := range incrs {
		out[i] = uint64(c.Val())
	}
	return out, nil
}

type rueidisCounter struct{ c rueidis.Client }

func (r rueidisCounter) incrExpire(ctx context.Context, keys []string, hits []uint64, expire []int64) ([]uint64, error) {
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for i, k := range keys {
		cmds = append(cmds,
			r.c.B().Incrby().Key(k).Increment(int64(hits[i])).Build(),
			r.c.B().Expire().Key(k).Seconds(expire[i]).Build())
	}
	out := make([]uint64, len(keys))
	for i, res := range r.c.DoMulti(ctx, cmds...) {
		if i%2 == 1 {
			if err := res.Error(); err != nil {
				return nil, err
			}
			continue
		}
		n, err := res.AsInt64()
		if err != nil {
			return nil, err
		}
		out[i/2] = uint64(n)
	}
	return out, nil
}

// newCounter returns the counter of client, a *redis.Client or a
// rueidis.Client.
func newCounter(client any) (counter, error) {
	switch c := client.(type) {
	case *redis.Client:
		return goRedisCounter{c}, nil
	case rueidis.Client:
		return rueidisCounter{c}, nil
	}
	return nil, fmt.Errorf("client %T; pass a *redis.Client or a rueidis.Client", client)
}

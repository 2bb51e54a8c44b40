package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
)

// other is the BySuffix entry of keys with no algorithm suffix.
const other = "other"

// suffixes maps each algorithm's key suffix to its name.
func suffixes() map[string]string {
	m := map[string]string{}
	for _, name := range algorithms.Names() {
		m[algorithms.Rule{Algorithm: name}.KeySuffix()] = string(name)
	}
	return m
}

// windowKeySuffix returns the suffix of a fixed window's key, which keeps
// a key per window: its suffix, ':' and the window's start in ms.
func windowKeySuffix(rest string) (string, bool) {
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return "", false
	}
	for _, c := range rest[i+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return rest[:i], true
}

// nodes returns the servers holding keys: every master of a cluster, or
// the one server.
func nodes(ctx context.Context, c redis.UniversalClient) ([]*redis.Client, error) {
	switch cc := c.(type) {
	case *redis.Client:
		return []*redis.Client{cc}, nil
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []*redis.Client
		)
		err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			out = append(out, n)
			return nil
		})
		slices.SortFunc(out, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
		return out, err
	}
	return nil, fmt.Errorf("unsupported client %T", c)
}

// sampled is a key picked for MEMORY USAGE.
type sampled struct {
	node *redis.Client
	key  string
}

// inspect gathers the report.
func inspect(ctx context.Context, c redis.UniversalClient, o options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ns, err := nodes(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's masters: %w", err)
	}
	r := &Report{Prefix: o.prefix, BySuffix: map[string]int64{}}
	sfx := suffixes()
	var sample []sampled
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	// Slowlog first, so that this tool's own commands are not in it.
	for _, n := range ns {
		if err := r.readSlowlog(ctx, n, o.slowlog); err != nil {
			return nil, err
		}
	}
	for _, n := range ns {
		r.Nodes = append(r.Nodes, evictionSettings(ctx, n))
		done, err := r.scan(ctx, n, o, sfx, func(key string) {
			// Reservoir sampling: every key has the same chance.
			switch {
			case len(sample) < o.sample:
				sample = append(sample, sampled{n, key})
			case o.sample > 0:
				if j := rng.Int64N(r.Keys); j < int64(o.sample) {
					sample[j] = sampled{n, key}
				}
			}
		})
		if err != nil {
			return nil, err
		}
		if done {
			break
		}
	}
	if err := r.measure(ctx, sample); err != nil {
		return nil, err
	}
	return r, nil
}

// globEscape escapes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// scan counts n's keys under the prefix, checks their TTLs and offers each
// to pick. It reports whether MaxKeys was reached.
func (r *Report) scan(ctx context.Context, n *redis.Client, o options, sfx map[string]string, pick func(string)) (bool, error) {
	match := globEscape(o.prefix) + "*"
	var cursor uint64
	// SCAN ends when the cursor comes back to 0; the bound on calls is a
	// safety net far above what a full iteration takes.
	for calls := int64(0); calls < 1<<40; calls++ {
		keys, next, err := n.Scan(ctx, cursor, match, o.count).Result()
		if err != nil {
			return false, fmt.Errorf("SCAN on %s: %w", n.Options().Addr, err)
		}
		if left := o.maxKeys - r.Keys; int64(len(keys)) >= left {
			keys = keys[:left]
			r.Truncated = true
		}
		if err := r.page(ctx, n, keys, sfx, pick); err != nil {
			return false, err
		}
		if r.Truncated {
			return true, nil
		}
		if cursor = next; cursor == 0 {
			return false, nil
		}
	}
	return false, fmt.Errorf("SCAN on %s did not finish", n.Options().Addr)
}

// page accounts for one page of SCAN results.
func (r *Report) page(ctx context.Context, n *redis.Client, keys []string, sfx map[string]string, pick func(string)) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := n.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.Do(ctx, "PTTL", k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("PTTL on %s: %w", n.Options().Addr, err)
	}
	for i, k := range keys {
		ttl, err := ttls[i].Int64()
		if err != nil {
			return fmt.Errorf("PTTL %q: %w", k, err)
		}
		if ttl == -2 {
			continue // expired since SCAN listed it
		}
		r.Keys++
		if ttl == -1 {
			r.NoTTL++
			if len(r.NoTTLKeys) < listNoTTL {
				r.NoTTLKeys = append(r.NoTTLKeys, k)
			}
		}
		suffix := other
		if i := strings.LastIndexByte(k, '}'); i >= 0 {
			if _, ok := sfx[k[i+1:]]; ok {
				suffix = k[i+1:]
			} else if s, ok := windowKeySuffix(k[i+1:]); ok && (algorithms.Rule{Algorithm: algorithms.Name(sfx[s])}).PerWindow() {
				suffix = s
			}
		}
		r.BySuffix[suffix]++
		pick(k)
	}
	return nil
}

// measure runs MEMORY USAGE on the sample and extrapolates.
func (r *Report) measure(ctx context.Context, sample []sampled) error {
	for _, s := range sample {
		// SAMPLES 0 measures every element of a sorted set exactly.
		v, err := s.node.MemoryUsage(ctx, s.key, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since
		}
		if err != nil {
			return fmt.Errorf("MEMORY USAGE %q: %w", s.key, err)
		}
		r.Sampled++
		r.SampledBytes += v
	}
	if r.Sampled > 0 {
		r.EstimatedBytes = r.SampledBytes * r.Keys / r.Sampled
	}
	return nil
}

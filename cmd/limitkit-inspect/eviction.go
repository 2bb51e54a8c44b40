package main

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// evictionSettings reads n's maxmemory settings and says how they endanger
// limiter keys.
func evictionSettings(ctx context.Context, n *redis.Client) Node {
	node := Node{Addr: n.Options().Addr}
	vals, err := n.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		node.ConfigErr = err.Error()
		return node
	}
	node.MaxmemoryPolicy = vals["maxmemory-policy"]
	node.Maxmemory, _ = strconv.ParseInt(vals["maxmemory"], 10, 64)
	node.Warning = evictionWarning(node.MaxmemoryPolicy, node.Maxmemory)
	return node
}

// evictionWarning says how a maxmemory policy endangers limiter keys.
func evictionWarning(policy string, maxmemory int64) string {
	switch {
	case strings.HasPrefix(policy, "allkeys-"):
		return "Redis may evict limiter keys when memory is full, and an evicted key gets its full allowance back; " +
			"use a Redis of its own for limits, or noeviction"
	case strings.HasPrefix(policy, "volatile-"):
		return "Redis may evict keys with a TTL when memory is full, and every limiter key has one: an evicted key " +
			"gets its full allowance back; use noeviction"
	case policy == "noeviction" && maxmemory > 0:
		return "when memory is full Redis refuses writes (OOM): every decision fails, and is made by the fallback " +
			"store's policy, if any; watch used_memory against maxmemory"
	}
	return ""
}

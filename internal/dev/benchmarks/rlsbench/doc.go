// Package rlsbench measures the Envoy rate limit service of package rls
// at steady state: ShouldRateLimit per second and p50/p99 latency over
// loopback gRPC from concurrent callers, with one and three descriptors
// per request, on the memory store and on a private redis-server through
// both of limitkit's Redis stores, beside the reference server's
// algorithm (Reference: a pipelined INCRBY+EXPIRE per descriptor, as
// envoyproxy/ratelimit counts) serving the same API on the same server,
// and beside floors (gRPC answering OK with no store; one EVALSHA of
// `return 1` per request and the reference's pipeline, both from a plain
// client without gRPC).
//
// Each cell (a contender under a request shape) starts from an empty
// server with fresh clients (go-redis pools dialled in full), runs a
// warm-up of its own load at full concurrency so keys hold their steady
// contents, then is measured for a bounded time with redis-server's CPU
// (/proc) and command counts read around it. Rounds interleave the cells;
// tables give medians over rounds, and ratios are medians of per-round
// ratios, each pair measured in the same round: the machinery of package
// harness, which cmd/compare shares. The command is cmd/rlsbench (in
// internal/dev/benchmarks); see README.md.
package rlsbench

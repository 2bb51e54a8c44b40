// Package benchmarks measures limitkit side by side with other Go rate
// limiters on the same workloads, in one process, and against the limits
// of the machine: raw Redis commands and redis-benchmark running limitkit's
// own scripts on the same redis-server.
//
// It lives in its own module (internal/dev/benchmarks/go.mod, with replace
// directives to the repository root and to rls) so that the peers it
// compares with never enter limitkit's go.mod. The module is the one home
// of the benchmarks: package rlsbench (cmd/rlsbench) measures the rate
// limit service, and both measure with package harness.
//
// The pieces:
//
//   - A Workload says how many keys are hit and whether the limit is one
//     that never denies (pure overhead) or one that denies nearly every
//     request (after the warm-up has used up every key's allowance).
//     Workloads lists the in-memory ones, RedisWorkloads the Redis ones
//     (10,000 keys never-deny; 100 keys at 5 per minute deny-heavy).
//   - A Contender is one limiter set up for a workload: limitkit's memory
//     store (called directly and through limiter.Limiter) and Redis stores
//     for every algorithm in algorithms.Names, the peers
//     (golang.org/x/time/rate, sethvargo/go-limiter, throttled/throttled,
//     ulule/limiter, go-redis/redis_rate), the seed article's script
//     (SeedScript) on both clients, and floors. MemoryContenders and
//     RedisContenders list them.
//   - Serial, Parallel and Concurrent turn a contender into a benchmark
//     function for testing.B (the in-memory half); RunFor, Warm and
//     MeasureRedis run a Redis cell for a fixed time at steady state (a
//     harness.Loop) and read what the client allocated and what the
//     server spent (harness.Measure: INFO commandstats, INFO cpu, /proc);
//     OverAdmissions checks a deny-heavy cell never admitted more than
//     its limit.
//   - Floors runs redis-benchmark with limitkit's scripts against the
//     private redis-server of harness.StartServer.
//   - wire.go is the one file that reaches limitkit's Redis wire format
//     (scripts, their ARGV, key suffixes), which is not public API.
//
// Run the whole comparison with one command (see README.md):
//
//	cd internal/dev/benchmarks && go run ./cmd/compare
package benchmarks

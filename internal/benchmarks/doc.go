// Package benchmarks measures limitkit side by side with other Go rate
// limiters on the same workloads, in one process, and against the limits
// of the machine: raw Redis commands and redis-benchmark running limitkit's
// own scripts on the same redis-server.
//
// It lives in its own module (internal/benchmarks/go.mod, with a replace
// directive to the repository root) so that the peers it compares with
// never enter limitkit's go.mod.
//
// The pieces:
//
//   - A Workload says how many keys are hit and whether the limit is one
//     that never denies (pure overhead) or one that denies nearly every
//     request (after a warm-up pass has used up every key's allowance).
//   - A Contender is one limiter set up for a workload: limitkit's memory
//     store (called directly and through limiter.Limiter) and Redis stores
//     for every algorithm in algorithms.Names, and the peers
//     (golang.org/x/time/rate, sethvargo/go-limiter, throttled/throttled,
//     ulule/limiter, go-redis/redis_rate). MemoryContenders and
//     RedisContenders list them.
//   - Serial, Parallel and Concurrent turn a contender into a benchmark
//     function for testing.B; the benchmarks in this package's tests and
//     the comparison program cmd/compare run the same functions.
//   - StartServer starts a private redis-server on a free loopback port;
//     RedisBenchmark runs redis-benchmark against it for the floors, and
//     CommandStats reads INFO commandstats for the server's cost per
//     decision.
//
// Run the whole comparison with one command (see README.md):
//
//	cd internal/benchmarks && go run ./cmd/compare
package benchmarks

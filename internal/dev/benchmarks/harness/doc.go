// Package harness is the measuring machinery every benchmark of limitkit
// shares: cmd/compare (limitkit beside other Go rate limiters and the
// Redis floors, package benchmarks) and cmd/rlsbench (the Envoy rate limit
// service beside envoyproxy/ratelimit's algorithm, package rlsbench).
//
// A figure is measured at steady state, the same way in both:
//
//   - StartServer starts a private redis-server on a free loopback port,
//     persistence off; a cell (one contender under one load) starts on an
//     emptied server (Server.FlushAll) with fresh clients (NewGoRedis dials
//     a go-redis pool in full; RueidisOptions, GoRedisOptions are the
//     clients' settings);
//   - a warm-up of the cell's own load, not measured, then the measured
//     stretch (DefaultWarmup, DefaultMeasured: every Redis cell ≥ 2 s),
//     both a closed Loop from concurrent callers, bounded in time and in
//     count;
//   - Measure reads around the measured stretch what it cost: the server's
//     CPU by /proc and INFO cpu, its commands and script calls (INFO
//     commandstats), this process's allocations and CPU;
//   - rounds interleave the cells (Rotate), tables give the Median over
//     DefaultRounds rounds or more, and a Ratio is the median of per-round
//     ratios, both cells measured in the same round of one run
//     (RatioOf); WriteTable prints them as markdown;
//   - SetUnset gives a -quick smoke run its defaults, and Shortfall says
//     when a run is below that standard.
package harness

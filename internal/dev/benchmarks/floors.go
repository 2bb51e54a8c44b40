package benchmarks

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// floorPrefix starts redis-benchmark's keys, which follow the layout of
// limitkit's: prefix + "{" + id + "}" + Rule.KeySuffix().
const floorPrefix = "rb:"

// Floor is one redis-benchmark run: a command (a limitkit script, the
// trivial script, INCR) sent by Clients connections, Pipeline commands per
// round trip.
type Floor struct {
	// Name names the command, e.g. "sliding_log", "EVALSHA return 1" or "INCR".
	Name string
	// Algorithm is set for limitkit scripts.
	Algorithm algorithms.Name
	// Workload is the workload the script's ARGV encode (keys, limit).
	Workload Workload
	// Clients and Pipeline are redis-benchmark's -c and -P.
	Clients, Pipeline int
	// Requests is redis-benchmark's -n.
	Requests int
	// Args is the command line of the command, with __rand_int__ standing
	// for the key id when Workload.Keys > 1.
	Args []string
	// warmSuffix, when set, is the key suffix of a deny-heavy script
	// whose keys must be spent first, by warmCalls calls each.
	warmSuffix string
	warmCalls  int64
}

// FloorResult is what a Floor measured.
type FloorResult struct {
	// PerSecond is redis-benchmark's requests per second.
	PerSecond float64
	// ServerUsec is the server's time per command (INFO commandstats),
	// in microseconds, for the command's own entry (evalsha or incr).
	ServerUsec float64
}

// Floors returns the redis-benchmark runs for the server: for each
// algorithm in algorithms.Names, its script (loaded with SCRIPT LOAD, ARGV
// from takeArgs at the fixed time now, ms) under each workload of
// workloads; then EVALSHA of TrivialScript and INCR over the same keys;
// each with pipeline 1 and 16, from clients connections.
func Floors(ctx context.Context, s *harness.Server, now int64, clients int, workloads []Workload) ([]Floor, error) {
	var fs []Floor
	add := func(f Floor) {
		for _, p := range []int{1, 16} {
			f.Pipeline = p
			f.Clients = clients
			f.Requests = 15_000
			if p > 1 {
				f.Requests = 60_000
			}
			fs = append(fs, f)
		}
	}
	id := func(w Workload) string {
		if w.Keys > 1 {
			return "__rand_int__"
		}
		return "000000000000"
	}
	for _, alg := range algorithms.Names() {
		src, err := scriptSource(alg)
		if err != nil {
			return nil, err
		}
		sha, err := s.Do(ctx, "SCRIPT", "LOAD", src)
		if err != nil {
			return nil, fmt.Errorf("SCRIPT LOAD %s: %w", alg, err)
		}
		for _, w := range workloads {
			rule := w.Rule(alg)
			argv, err := takeArgs(rule, now)
			if err != nil {
				return nil, err
			}
			key := floorPrefix + "{" + id(w) + "}" + keySuffix(rule)
			args := append([]string{"EVALSHA", fmt.Sprint(sha), "1", key}, argv...)
			f := Floor{Name: string(alg), Algorithm: alg, Workload: w, Args: args}
			if w.Deny {
				f.warmSuffix, f.warmCalls = keySuffix(rule), rule.Limit
			}
			add(f)
		}
	}
	sha, err := s.Do(ctx, "SCRIPT", "LOAD", TrivialScript)
	if err != nil {
		return nil, err
	}
	for _, w := range workloads {
		if w.Deny {
			continue
		}
		add(Floor{Name: "EVALSHA " + TrivialScript, Workload: w, Args: []string{"EVALSHA", fmt.Sprint(sha), "1", floorPrefix + "{" + id(w) + "}"}})
		add(Floor{Name: "INCR", Workload: w, Args: []string{"INCR", floorPrefix + "{" + id(w) + "}"}})
	}
	return fs, nil
}

// Run runs the floor on an emptied server and reads the server's cost per
// command. A deny-heavy script first gets the limit's worth of calls per
// key (not counted), so that the measured calls are denials.
func (f Floor) Run(ctx context.Context, s *harness.Server) (FloorResult, error) {
	if err := s.FlushAll(ctx); err != nil {
		return FloorResult{}, err
	}
	if f.warmSuffix != "" {
		args := make([]any, len(f.Args))
		for j, a := range f.Args {
			args[j] = a
		}
		for i := range f.Workload.Keys {
			args[3] = fmt.Sprintf("%s{%012d}%s", floorPrefix, i, f.warmSuffix)
			for range f.warmCalls {
				if _, err := s.Do(ctx, args...); err != nil {
					return FloorResult{}, fmt.Errorf("warming %s: %w", f.Name, err)
				}
			}
		}
	}
	if err := s.ResetStats(ctx); err != nil {
		return FloorResult{}, err
	}
	keyspace := 0
	if f.Workload.Keys > 1 {
		keyspace = f.Workload.Keys
	}
	rps, err := s.RedisBenchmark(ctx, f.Clients, f.Pipeline, f.Requests, keyspace, f.Args...)
	if err != nil {
		return FloorResult{}, err
	}
	stats, err := s.CommandStats(ctx)
	if err != nil {
		return FloorResult{}, err
	}
	res := FloorResult{PerSecond: rps}
	if st := stats[commandName(f.Args[0])]; st.Calls > 0 {
		res.ServerUsec = float64(st.Usec) / float64(st.Calls)
	}
	return res, nil
}

func commandName(arg string) string {
	b := []byte(arg)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

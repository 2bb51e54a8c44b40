package redisengine_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// BenchmarkCutScriptsOverPlain measures the logs' plain scripts (testdata)
// and the cut ones on one redis-server, as redis-benchmark -c 64 -P 16
// drives them over 10,000 keys at a fixed time: admitted (limit 100 per
// minute, every key holding 20 entries first) and denied (limit 5 per
// minute, every key full first). Rounds alternate plain and cut; it
// reports the medians of the rounds: the server's µs per EVALSHA (INFO
// commandstats), its CPU µs per EVALSHA (INFO cpu) and redis-benchmark's
// requests per second, with EVALSHA of "return 1" for the floor.
//
// go test -run x -bench CutScriptsOverPlain -benchtime 1x ./backend/internal/redisengine/
func BenchmarkCutScriptsOverPlain(b *testing.B) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		b.Skip("no redis-benchmark (apt-get install redis-tools)")
	}
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute})
	b.Cleanup(func() { _ = c.Close() })
	ctx := b.Context()
	const keys, requests, rounds = 10_000, 100_000, 3
	now := time.Now().UnixMilli()
	type cell struct {
		alg    algorithms.Name
		path   string // "admitted", "denied" or "floor"
		limit  int64
		before bool
	}
	var cells []cell
	for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog} {
		for _, path := range []string{"admitted", "denied"} {
			limit := int64(100)
			if path == "denied" {
				limit = 5
			}
			for _, before := range []bool{true, false} {
				cells = append(cells, cell{alg, path, limit, before})
			}
		}
	}
	cells = append(cells, cell{path: "floor"})
	type measure struct{ usec, cpu, rps float64 }
	got := make([][]measure, len(cells))
	for b.Loop() {
		for range rounds {
			for i, cl := range cells {
				src := "return 1"
				if cl.path != "floor" {
					if cl.before {
						var err error
						src, err = plainScript(cl.alg)
						require.NoError(b, err)
					} else {
						var err error
						src, err = rediswire.Script(cl.alg)
						require.NoError(b, err)
					}
				}
				sha, err := c.ScriptLoad(ctx, src).Result()
				require.NoError(b, err)
				require.NoError(b, c.FlushAll(ctx).Err())
				argv := func(cost int64) []any { return []any{now, 60_000, cl.limit, cost, "1"} }
				if cl.path != "floor" {
					// Fill every key: 20 entries, or all of them.
					fill := int64(20)
					if cl.path == "denied" {
						fill = cl.limit
					}
					for k0 := 0; k0 < keys; k0 += 500 {
						_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
							for k := k0; k < min(k0+500, keys); k++ {
								p.EvalSha(ctx, sha, []string{fmt.Sprintf("bn:{%012d}", k)}, argv(fill)...)
							}
							return nil
						})
						require.NoError(b, err)
					}
				}
				require.NoError(b, c.ConfigResetStat(ctx).Err())
				cpu0 := serverCPU(ctx, b, c)
				args := []string{"-h", "127.0.0.1", "-p", strings.TrimPrefix(srv.Addr()[strings.LastIndex(srv.Addr(), ":"):], ":"),
					"-c", "64", "-P", "16", "-n", strconv.Itoa(requests), "-r", strconv.Itoa(keys), "--csv",
					"EVALSHA", sha, "1", "bn:{__rand_int__}"}
				for _, a := range argv(1) {
					args = append(args, fmt.Sprint(a))
				}
				out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
				require.NoError(b, err)
				cpu1 := serverCPU(ctx, b, c)
				calls, usec := evalshaStats(ctx, b, c)
				require.Equal(b, int64(requests), calls)
				got[i] = append(got[i], measure{float64(usec) / float64(calls), (cpu1 - cpu0) * 1e6 / float64(calls), benchmarkRPS(b, string(out))})
				// Check the path: one more call decides as the cell says.
				if cl.path != "floor" {
					v, err := c.EvalSha(ctx, sha, []string{"bn:{000000000007}"}, argv(1)...).Int64Slice()
					require.NoError(b, err)
					require.Equal(b, cl.path == "admitted", v[0] == 1, "%+v", cl)
				}
			}
		}
	}
	median := func(ms []measure, f func(measure) float64) float64 {
		v := make([]float64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for i, cl := range cells {
		name := "floor/return-1"
		if cl.path != "floor" {
			name = fmt.Sprintf("%s/%s/%s", cl.alg, cl.path, map[bool]string{true: "before", false: "now"}[cl.before])
		}
		b.Logf("%-28s server µs/call %5.2f  cpu µs/call %5.2f  calls/s %8.0f  (median of %d)", name,
			median(got[i], func(m measure) float64 { return m.usec }),
			median(got[i], func(m measure) float64 { return m.cpu }),
			median(got[i], func(m measure) float64 { return m.rps }), len(got[i]))
	}
}

// serverCPU returns the server's used_cpu_sys + used_cpu_user in seconds.
func serverCPU(ctx context.Context, b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	require.NoError(b, err)
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err)
			total += f
		}
	}
	return total
}

// evalshaStats returns INFO commandstats' calls and usec of EVALSHA.
func evalshaStats(ctx context.Context, b *testing.B, c *redis.Client) (calls, usec int64) {
	info, err := c.Info(ctx, "commandstats").Result()
	require.NoError(b, err)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls, usec
}

// benchmarkRPS reads the rps column of redis-benchmark --csv output.
func benchmarkRPS(b *testing.B, out string) float64 {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(b, len(lines), 2, out)
	f := strings.Split(lines[len(lines)-1], ",")
	v, err := strconv.ParseFloat(strings.Trim(f[1], `"`), 64)
	require.NoError(b, err, out)
	return v
}

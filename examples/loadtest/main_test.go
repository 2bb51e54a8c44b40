package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// checkRun runs the load test briefly and checks that its report is
// consistent: every decision is admitted, denied or an error; no errors;
// admissions within the bound; and the printed figures say the same.
func checkRun(t *testing.T, redisURL, client string, cfg config) {
	t.Helper()
	store, where, closeStore, err := openStore(redisURL, client)
	require.NoError(t, err)
	defer closeStore()
	rep, err := run(context.Background(), store, cfg)
	require.NoError(t, err)

	require.Positive(t, rep.decisions)
	require.Equal(t, rep.decisions, rep.admitted+rep.denied+rep.errors)
	require.Zero(t, rep.errors, "errors: %v", rep.errorSamples)
	require.Equal(t, rep.decisions, rep.latency.total)
	require.LessOrEqual(t, rep.admitted, rep.bound)
	// Every key's first request is admitted, and with few keys and a long
	// window the limit is reached, so both outcomes occur.
	require.Positive(t, rep.admitted)
	require.Positive(t, rep.denied)
	// The tightest bound for the window algorithms: limit per aligned
	// window touched, per key. (Algorithms with a burst on top of a rate
	// are held to rep.bound only.)
	switch cfg.algorithm {
	case algorithms.SlidingLog, algorithms.SlidingCounter, algorithms.FixedWindow:
		w := cfg.window.Milliseconds()
		windows := rep.end.UnixMilli()/w - rep.start.UnixMilli()/w + 1
		require.LessOrEqual(t, rep.admitted, cfg.limit*windows*int64(cfg.keys))
	}
	p50, p99, p999 := rep.latency.quantile(0.5), rep.latency.quantile(0.99), rep.latency.quantile(0.999)
	require.LessOrEqual(t, p50, p99)
	require.LessOrEqual(t, p99, p999)
	require.LessOrEqual(t, p999, rep.latency.max)

	var out strings.Builder
	rep.print(&out, cfg, where)
	text := out.String()
	t.Log("\n" + text)
	field := func(name string) int64 {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+(\d+)`).FindStringSubmatch(text)
		require.NotNil(t, m, "no %q line in:\n%s", name, text)
		n, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, field("decisions"), field("admitted")+field("denied")+field("errors"))
	require.Equal(t, rep.admitted, field("admitted"))
	require.Contains(t, text, "p50 ")
	require.Contains(t, text, "p999 ")
	require.Contains(t, text, fmt.Sprintf("at most %d allowed", rep.bound))
	require.Contains(t, text, ": ok\n")
}

func shortConfig(alg algorithms.Name) config {
	return config{algorithm: alg, limit: 5, window: time.Minute, keys: 20, concurrency: 8,
		duration: 200 * time.Millisecond, timeout: 5 * time.Second}
}

// rateAlgorithms lists the algorithms the load test drives: not those that
// hold leases, which it refuses.
func rateAlgorithms() []algorithms.Name {
	var names []algorithms.Name
	for _, alg := range algorithms.Names() {
		if !(algorithms.Rule{Algorithm: alg}).HoldsLeases() {
			names = append(names, alg)
		}
	}
	return names
}

func TestLoadtestInMemory(t *testing.T) {
	for _, alg := range rateAlgorithms() {
		t.Run(string(alg), func(t *testing.T) { checkRun(t, "", "", shortConfig(alg)) })
	}
}

func TestLoadtestOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		for _, alg := range rateAlgorithms() {
			t.Run(client+"/"+string(alg), func(t *testing.T) {
				checkRun(t, "redis://"+srv.Addr()+"/0", client, shortConfig(alg))
			})
		}
	}
}

func TestLoadtestRejectsBadConfig(t *testing.T) {
	store, _, closeStore, err := openStore("", "")
	require.NoError(t, err)
	defer closeStore()
	for _, mutate := range []func(*config){
		func(c *config) { c.keys = 0 },
		func(c *config) { c.concurrency = 0 },
		func(c *config) { c.duration = 0 },
		func(c *config) { c.limit = 0 },
		func(c *config) { c.algorithm = "nope" },
		func(c *config) { c.algorithm = algorithms.Concurrency },
	} {
		cfg := shortConfig(algorithms.FixedWindow)
		mutate(&cfg)
		_, err := run(context.Background(), store, cfg)
		require.Error(t, err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}} {
		got := h.quantile(c.q)
		// Within the bucket width (1/16) above the exact value.
		require.GreaterOrEqual(t, got, c.want, "q=%v", c.q)
		require.LessOrEqual(t, got, c.want+c.want/16+time.Microsecond, "q=%v", c.q)
	}
	require.Equal(t, time.Millisecond, h.max)
	for i := range 2000 {
		require.LessOrEqual(t, time.Duration(i), upper(bucketOf(uint64(i))))
	}
}

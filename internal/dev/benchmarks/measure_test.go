package benchmarks

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestOverLimit(t *testing.T) {
	const w = 60_000
	cases := []struct {
		name    string
		ts      []int64
		aligned bool
		want    int64
	}{
		{"at the limit", []int64{0, 1, 2, 3, 4}, false, 0},
		// The control: one more in the same window is caught.
		{"one over", []int64{0, 1, 2, 3, 4, 5}, false, 1},
		{"two windows apart", []int64{0, 1, 2, 3, 4, 70_000, 70_001, 70_002, 70_003, 70_004}, false, 0},
		// Across an aligned boundary: fine per aligned window, over in a
		// sliding one.
		{"boundary aligned", []int64{59_000, 59_001, 59_002, 59_003, 59_004, 60_000, 60_001, 60_002, 60_003, 60_004}, true, 0},
		{"boundary sliding", []int64{59_000, 59_001, 59_002, 59_003, 59_004, 60_000, 60_001, 60_002, 60_003, 60_004}, false, 5},
		{"aligned over", []int64{60_000, 60_001, 60_002, 60_003, 60_004, 119_999}, true, 1},
	}
	for _, c := range cases {
		if got := overLimit(c.ts, 5, w, c.aligned); got != c.want {
			t.Errorf("%s: over %d, want %d", c.name, got, c.want)
		}
	}
}

func TestMeasureRedisCountsScriptCalls(t *testing.T) {
	s := needServer(t)
	ctx := context.Background()
	for _, c := range RedisContenders(s.Addr()) {
		if c.Name != "floor rueidis EVALSHA return 1" && c.Name != "floor rueidis INCR" {
			continue
		}
		cell, err := Prepare(ctx, c, Workload{Keys: 10})
		if err != nil {
			t.Fatal(err)
		}
		m, err := MeasureRedis(ctx, cell, s, 4, 50*time.Millisecond)
		cell.Close()
		if err != nil {
			t.Fatal(err)
		}
		// One EVALSHA per decision; INCR (the control) runs no script.
		want := m.Decisions
		if strings.Contains(c.Name, "INCR") {
			want = 0
		}
		if m.Decisions == 0 || m.ScriptCalls != want || m.Commands != m.Decisions {
			t.Fatalf("%s: %d decisions, %d script calls (want %d), %d commands", c.Name, m.Decisions, m.ScriptCalls, want, m.Commands)
		}
		if m.Mallocs == 0 {
			t.Fatalf("%s: no allocation counted over %d decisions", c.Name, m.Decisions)
		}
	}
}

// brokenSeed is the seed script without its count: it admits everything.
const brokenSeed = `redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4]) return 1`

func TestSeedScriptIsExact(t *testing.T) {
	s := needServer(t)
	ctx := context.Background()
	w := Workload{Keys: 3, Deny: true, Limit: 5, Window: time.Minute}
	for _, c := range RedisContenders(s.Addr()) {
		if c.Group != "seed" {
			continue
		}
		if err := s.FlushAll(ctx); err != nil {
			t.Fatal(err)
		}
		cell, err := Prepare(ctx, c, w)
		if err != nil {
			t.Fatal(err)
		}
		r := cell.RunFor(ctx, 8, 50*time.Millisecond)
		over := cell.OverAdmissions(false)
		cell.Close()
		if r.Decisions == 0 || r.Errors != 0 || r.Admitted != 0 || over != 0 {
			t.Fatalf("%s: %+v after the warm-up spent every key, over-admissions %d", c.Name, r, over)
		}
	}
	// The control: a script that does not count is caught.
	broken := Contender{Name: "broken seed", Group: "seed", New: func(w Workload) (Decider, func(), error) {
		return goRedisScript(s.Addr(), w, brokenSeed)
	}}
	cell, err := Prepare(ctx, broken, w)
	if err != nil {
		t.Fatal(err)
	}
	defer cell.Close()
	r := cell.RunFor(ctx, 4, 20*time.Millisecond)
	if over := cell.OverAdmissions(false); over != r.Admitted || over == 0 {
		t.Fatalf("broken script: %d admitted, %d over-admissions counted", r.Admitted, over)
	}
}

func TestSeedScriptAdmitsTheLimit(t *testing.T) {
	s := needServer(t)
	ctx := context.Background()
	if err := s.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	w := Workload{Keys: 1, Deny: true, Limit: 5, Window: time.Minute}
	for _, c := range RedisContenders(s.Addr()) {
		if c.Group != "seed" {
			continue
		}
		decide, release, err := c.New(w)
		if err != nil {
			t.Fatal(err)
		}
		var got []bool
		for range 7 {
			ok, err := decide(ctx, "k-"+c.Name)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ok)
		}
		release()
		want := []bool{true, true, true, true, true, false, false}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: decisions %v, want %v", c.Name, got, want)
			}
		}
	}
}

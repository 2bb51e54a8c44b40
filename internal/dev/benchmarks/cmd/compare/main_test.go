package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), nil)
	if err != nil || cfg.redisTime != 2*time.Second || cfg.warmup != time.Second || cfg.count != 3 || !slices.Equal(cfg.callers, []int{64}) {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	// -quick changes the defaults, not what is given.
	cfg, err = parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{"-quick", "-count", "2"})
	if err != nil || cfg.redisTime != 150*time.Millisecond || cfg.count != 2 {
		t.Fatalf("-quick -count 2: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-callers", "8,x"}, {"-count", "0"}, {"-redistime", "0s"}, {"-run", "("}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		if _, err := parseFlags(fs, bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestRatiosPrinted runs a small comparison (a few contenders, two short
// rounds) and checks that the ratios the README quotes are printed, from
// this one run.
func TestRatiosPrinted(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITKIT_REQUIRE_REDIS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cfg, err := parseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{
		"-count", "2", "-redistime", "40ms", "-warmup", "40ms", "-memory=false", "-floors=false",
		"-run", `^(limitkit rueidis (fixed_window|sliding_log)|go-redis/redis_rate|ulule/limiter redis|seed script rueidis|floor rueidis EVALSHA return 1)$`,
	})
	if err != nil {
		t.Fatal(err)
	}
	var progress, out bytes.Buffer
	c := &comparison{config: cfg, progress: &progress}
	if err := c.run(); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	c.print(&out)
	text := out.String()
	// A ratio cell: median and the range of 2 rounds.
	r := `\d+\.\d\d× \(\d+\.\d\d–\d+\.\d\d\)`
	for _, row := range []string{"limitkit rueidis fixed_window", "limitkit rueidis sliding_log"} {
		// vs redis_rate, vs ulule, vs the seed script, vs the floor.
		re := regexp.MustCompile(`\| ` + row + ` \| ` + r + ` \| ` + r + ` \| ` + r + ` \| ` + r + ` \| [0-9.]+ / [0-9.]+ \|`)
		if n := len(re.FindAllString(text, -1)); n != 2 {
			t.Errorf("%s: %d ratio rows, want one per workload\n%s", row, n, text)
		}
	}
	if !strings.Contains(text, "over-admissions") || !strings.Contains(progress.String(), "estimated run time") {
		t.Errorf("no over-admissions column or no estimate:\n%s\n%s", text, progress.String())
	}
}

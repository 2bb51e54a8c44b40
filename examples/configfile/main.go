// Command configfile builds a service's limiters from a configuration file
// (limits.yaml beside it, read by limiter/config) and runs a few decisions
// on each.
//
//	go run ./examples/configfile                          # the shipped limits.yaml, in memory
//	go run ./examples/configfile -config my-limits.yaml   # your file
//	go run ./examples/configfile -config my-limits.yaml -check
//	go run ./examples/configfile -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// -check only validates the file and lists its policies, as a deploy step
// would; an invalid file is reported with its line and field. -redis and
// -client replace the file's backend.url and backend.client.
//
// It uses a simulated clock, so it prints the same thing every time.
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// shipped is the example file, used when -config is not given.
//
//go:embed limits.yaml
var shipped []byte

// options are the command's flags.
type options struct {
	configPath string // "" for the shipped file
	redisURL   string // replaces backend.url when set
	client     string // replaces backend.client when set
	check      bool
}

func main() {
	var o options
	flag.StringVar(&o.configPath, "config", "", "configuration file (YAML, or JSON when named *.json); default: the shipped limits.yaml")
	flag.StringVar(&o.redisURL, "redis", "", "Redis URL (redis://host:port/db; rediss://, redis+cluster://, redis+sentinel:// as backend/storeurl reads them) replacing the file's backend.url")
	flag.StringVar(&o.client, "client", "", "Redis client library replacing the file's backend.client: go-redis or rueidis")
	flag.BoolVar(&o.check, "check", false, "only validate the file and list its policies")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "configfile:", err)
		os.Exit(1)
	}
}

// load reads the configuration the options name.
func load(o options) (*config.Config, string, error) {
	if o.configPath == "" {
		cfg, err := config.Parse(shipped, config.YAML)
		return cfg, "limits.yaml (shipped)", err
	}
	cfg, err := config.Load(o.configPath)
	return cfg, o.configPath, err
}

func run(ctx context.Context, out io.Writer, o options) error {
	cfg, name, err := load(o)
	if err != nil {
		return err
	}
	if o.redisURL != "" {
		cfg.Backend.URL = o.redisURL
	}
	if o.client != "" {
		cfg.Backend.Client = o.client
	}
	fmt.Fprintf(out, "%s: %d policies\n", name, len(cfg.Policies))
	for _, p := range cfg.Policies {
		fmt.Fprintf(out, "  %-8s %s\n", p.Name, describe(p.Config))
	}
	if o.check {
		// Overrides are validated too.
		if err := cfg.Validate(); err != nil {
			return err
		}
		fmt.Fprintln(out, "valid")
		return nil
	}

	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	set, err := cfg.Build(ctx, config.WithLimiterOptions(limiter.WithClock(fake)))
	if err != nil {
		return err
	}
	defer set.Close()
	fmt.Fprintf(out, "\nDecisions (simulated clock; store: %s):\n", redact(cfg.Backend))
	for _, policy := range set.Names() {
		lim := set.Limiter(policy)
		const key = "demo-user"
		// The demo key starts with its full allowance, even on a Redis
		// that kept a previous run's counts.
		if err := lim.Reset(ctx, key); err != nil {
			return err
		}
		fake.Set(start)
		c := lim.Config()
		if err := burst(ctx, out, lim, key, c.Limit+2, "at once"); err != nil {
			return err
		}
		if c.Guard != nil {
			fake.Advance(c.Window)
			if err := burst(ctx, out, lim, key, c.Limit+2, "one window later"); err != nil {
				return err
			}
		}
	}
	return nil
}

// burst makes n requests for key at the same moment and reports the
// outcome.
func burst(ctx context.Context, out io.Writer, lim *limiter.Limiter, key string, n int64, when string) error {
	admitted := int64(0)
	var last limiter.Decision
	for range n {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			return err
		}
		if d.Allowed {
			admitted++
		}
		last = d
	}
	by := "its limit"
	if last.Rule == limiter.GuardRule {
		by = "its guard"
	}
	fmt.Fprintf(out, "  %-30s %d requests %s: %d admitted, then denied by %s (retry in %v)\n",
		lim.Config().Prefix+"{"+key+"}", n, when, admitted, by, last.RetryAfter)
	return nil
}

// describe writes a policy in a line.
func describe(c limiter.Config) string {
	alg := c.Algorithm
	if alg == "" {
		alg = "sliding_log"
	}
	s := fmt.Sprintf("%s, %d per %v", alg, c.Limit, c.Window)
	if g := c.Guard; g != nil {
		s += fmt.Sprintf(", guard %d per %v", g.Limit, g.Window)
	}
	if p := c.OnFailure.String(); p != "" {
		s += ", on failure " + p
	}
	return s + ", keys under " + c.Prefix
}

// redact names the backend without the URL's user name and password.
func redact(b config.Backend) string {
	if strings.HasPrefix(b.URL, "memory:") {
		return b.URL
	}
	client := b.Client
	if client == "" {
		client = config.GoRedis
	}
	return storeurl.RedactURL(b.URL) + " via " + client
}

// Command limitkit-inspect is an operator's report on the limitkit keys in a Redis:
// how many there are of each algorithm, how much memory they take, whether
// any has no expiry, whether limitkit's scripts show up in SLOWLOG, and
// whether the server's eviction policy endangers them.
//
//	go run ./cmd/limitkit-inspect -redis redis://127.0.0.1:6379/0 -prefix limitkit:
//	go run ./cmd/limitkit-inspect -redis 'redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001'
//
// It only reads, and it is gentle with a production server: keys are
// listed with SCAN (never KEYS) in pages of -count, TTLs are read in one
// pipeline per page, MEMORY USAGE runs on a bounded random sample of
// -sample keys (the total is extrapolated from it), and scanning stops
// after -max-keys keys. On a cluster every master is scanned. SCAN may list
// a key twice while Redis resizes its table, so on a busy server the counts
// can be slightly high; they are never low for keys that lived throughout.
//
// What the report flags:
//
//   - keys without a TTL: every limitkit script sets an expiry, so such a
//     key was written by hand or by a bug, and it never goes away;
//   - limitkit scripts in SLOWLOG (EVALSHA/EVAL of one of the scripts,
//     matched by SHA1 or by their text): slow decisions, usually sliding
//     logs with large limits;
//   - maxmemory-policy: allkeys-* and volatile-* policies can evict
//     limiter keys (they all have a TTL), and an evicted key hands its
//     full allowance back; noeviction with a maxmemory makes a full Redis
//     refuse every decision (OOM), which the fallback store then decides.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/limiter"
)

// Bounds and defaults of the flags.
const (
	defaultCount   = 1000
	maxCount       = 10_000
	defaultSample  = 1000
	maxSample      = 100_000
	defaultMaxKeys = 10_000_000
	defaultSlowlog = 128
	maxSlowlog     = 10_000
	// listNoTTL is how many keys without a TTL the report names.
	listNoTTL = 10
)

// options are the command's flags.
type options struct {
	prefix  string
	count   int64 // SCAN COUNT
	sample  int   // keys MEMORY USAGE runs on
	maxKeys int64 // scanning stops after this many keys
	slowlog int64 // SLOWLOG entries read per node
}

func (o *options) validate() error {
	switch {
	case o.count < 1 || o.count > maxCount:
		return fmt.Errorf("-count %d: give 1 to %d", o.count, maxCount)
	case o.sample < 0 || o.sample > maxSample:
		return fmt.Errorf("-sample %d: give 0 to %d", o.sample, maxSample)
	case o.maxKeys < 1:
		return fmt.Errorf("-max-keys %d: give at least 1", o.maxKeys)
	case o.slowlog < 0 || o.slowlog > maxSlowlog:
		return fmt.Errorf("-slowlog %d: give 0 to %d", o.slowlog, maxSlowlog)
	}
	return nil
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is main with its arguments and outputs, for tests; it returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", "", "Redis URL: redis://host:port/db, rediss://, redis+cluster://host:port?addr=host2:port2, "+
		"redis+sentinel://host:port?addr=...&master_name=NAME (required)")
	var o options
	fs.StringVar(&o.prefix, "prefix", limiter.DefaultPrefix, "key prefix of the limits to inspect")
	fs.Int64Var(&o.count, "count", defaultCount, "SCAN COUNT: keys asked for per SCAN call")
	fs.IntVar(&o.sample, "sample", defaultSample, "keys whose MEMORY USAGE is measured")
	fs.Int64Var(&o.maxKeys, "max-keys", defaultMaxKeys, "stop scanning after this many keys")
	fs.Int64Var(&o.slowlog, "slowlog", defaultSlowlog, "SLOWLOG entries read per node")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "inspect:", err)
		return 1
	}
	if err := o.validate(); err != nil {
		return fail(err)
	}
	if *redisURL == "" {
		return fail(errors.New("-redis URL is required"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// The URL's errors never hold its userinfo (see storeurl.Open).
	opened, err := storeurl.Open(ctx, *redisURL, storeurl.WithClient(storeurl.GoRedis))
	if err != nil {
		return fail(err)
	}
	defer opened.Close()
	if opened.GoRedis == nil {
		return fail(errors.New("-redis: memory:// is not a Redis URL; give redis://, rediss://, redis+cluster:// or redis+sentinel://"))
	}
	r, err := inspect(ctx, opened.GoRedis, o)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", storeurl.RedactURL(*redisURL), err))
	}
	r.print(stdout)
	return 0
}

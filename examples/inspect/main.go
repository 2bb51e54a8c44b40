// Command inspect is an operator's report on the limitkit keys in a Redis:
// how many there are of each algorithm, how much memory they take, whether
// any has no expiry, whether limitkit's scripts show up in SLOWLOG, and
// whether the server's eviction policy endangers them.
//
//	go run ./examples/inspect -redis redis://127.0.0.1:6379/0 -prefix limitkit:
//	go run ./examples/inspect -redis 'redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001'
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
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/internal/redisscript"
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

// Report is what inspect found.
type Report struct {
	Prefix string
	Nodes  []Node
	// Keys is the number of keys under Prefix (up to MaxKeys).
	Keys int64
	// Truncated reports that scanning stopped at options.maxKeys.
	Truncated bool
	// BySuffix counts keys by algorithm suffix (":sl", ...); keys with
	// another ending count under "other".
	BySuffix map[string]int64
	// NoTTL counts keys without an expiry; NoTTLKeys names the first few.
	NoTTL     int64
	NoTTLKeys []string
	// Sampled keys were measured with MEMORY USAGE, SampledBytes in all;
	// EstimatedBytes extrapolates to Keys.
	Sampled        int64
	SampledBytes   int64
	EstimatedBytes int64
	// Slow lists limitkit scripts found in SLOWLOG, by script;
	// SlowlogRead is the number of entries read.
	Slow        []SlowScript
	SlowlogRead int
}

// Node is one scanned server and its eviction settings.
type Node struct {
	Addr            string
	MaxmemoryPolicy string
	Maxmemory       int64
	// ConfigErr says why the settings could not be read (CONFIG disabled
	// on managed services, say).
	ConfigErr string
	// Warning says how the settings endanger limiter keys; "" when they
	// do not.
	Warning string
}

// SlowScript is one limitkit script's SLOWLOG entries.
type SlowScript struct {
	Script  string // an algorithm name, "multi" (all-or-nothing) or "batch" (Takes sent together)
	Entries int
	Slowest time.Duration
}

// other is the BySuffix entry of keys with no algorithm suffix.
const other = "other"

// suffixes maps each algorithm's key suffix to its name.
func suffixes() map[string]string {
	m := map[string]string{}
	for _, name := range algorithms.Names() {
		m[algorithms.Rule{Algorithm: name}.KeySuffix()] = string(name)
	}
	return m
}

// script is one limitkit Lua script as Redis sees it.
type script struct {
	name, body, sha string
}

// The names of the all-or-nothing script, and of those that decide Takes,
// Peeks and TakeAlls sent together, in reports.
const (
	multiScript     = "multi"
	batchScript     = "batch"
	peekBatchScript = "peek-batch"
	groupsScript    = "groups"
)

func scripts() []script {
	var out []script
	add := func(name, body string) {
		sum := sha1.Sum([]byte(body))
		out = append(out, script{name: name, body: body, sha: hex.EncodeToString(sum[:])})
	}
	for _, name := range algorithms.Names() {
		if body, err := redisscript.Script(name); err == nil {
			add(string(name), body)
		}
	}
	add(multiScript, redisscript.MultiScript())
	add(batchScript, redisscript.BatchScript())
	add(peekBatchScript, redisscript.PeekBatchScript())
	add(groupsScript, redisscript.GroupsScript())
	return out
}

// nodes returns the servers holding keys: every master of a cluster, or
// the one server.
func nodes(ctx context.Context, c redis.UniversalClient) ([]*redis.Client, error) {
	switch cc := c.(type) {
	case *redis.Client:
		return []*redis.Client{cc}, nil
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []*redis.Client
		)
		err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			out = append(out, n)
			return nil
		})
		slices.SortFunc(out, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
		return out, err
	}
	return nil, fmt.Errorf("unsupported client %T", c)
}

// sampled is a key picked for MEMORY USAGE.
type sampled struct {
	node *redis.Client
	key  string
}

// inspect gathers the report.
func inspect(ctx context.Context, c redis.UniversalClient, o options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ns, err := nodes(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's masters: %w", err)
	}
	r := &Report{Prefix: o.prefix, BySuffix: map[string]int64{}}
	sfx := suffixes()
	var sample []sampled
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	// Slowlog first, so that this tool's own commands are not in it.
	for _, n := range ns {
		if err := r.readSlowlog(ctx, n, o.slowlog); err != nil {
			return nil, err
		}
	}
	for _, n := range ns {
		r.Nodes = append(r.Nodes, evictionSettings(ctx, n))
		done, err := r.scan(ctx, n, o, sfx, func(key string) {
			// Reservoir sampling: every key has the same chance.
			switch {
			case len(sample) < o.sample:
				sample = append(sample, sampled{n, key})
			case o.sample > 0:
				if j := rng.Int64N(r.Keys); j < int64(o.sample) {
					sample[j] = sampled{n, key}
				}
			}
		})
		if err != nil {
			return nil, err
		}
		if done {
			break
		}
	}
	if err := r.measure(ctx, sample); err != nil {
		return nil, err
	}
	return r, nil
}

// globEscape escapes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// scan counts n's keys under the prefix, checks their TTLs and offers each
// to pick. It reports whether MaxKeys was reached.
func (r *Report) scan(ctx context.Context, n *redis.Client, o options, sfx map[string]string, pick func(string)) (bool, error) {
	match := globEscape(o.prefix) + "*"
	var cursor uint64
	// SCAN ends when the cursor comes back to 0; the bound on calls is a
	// safety net far above what a full iteration takes.
	for calls := int64(0); calls < 1<<40; calls++ {
		keys, next, err := n.Scan(ctx, cursor, match, o.count).Result()
		if err != nil {
			return false, fmt.Errorf("SCAN on %s: %w", n.Options().Addr, err)
		}
		if left := o.maxKeys - r.Keys; int64(len(keys)) >= left {
			keys = keys[:left]
			r.Truncated = true
		}
		if err := r.page(ctx, n, keys, sfx, pick); err != nil {
			return false, err
		}
		if r.Truncated {
			return true, nil
		}
		if cursor = next; cursor == 0 {
			return false, nil
		}
	}
	return false, fmt.Errorf("SCAN on %s did not finish", n.Options().Addr)
}

// page accounts for one page of SCAN results.
func (r *Report) page(ctx context.Context, n *redis.Client, keys []string, sfx map[string]string, pick func(string)) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := n.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.Do(ctx, "PTTL", k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("PTTL on %s: %w", n.Options().Addr, err)
	}
	for i, k := range keys {
		ttl, err := ttls[i].Int64()
		if err != nil {
			return fmt.Errorf("PTTL %q: %w", k, err)
		}
		if ttl == -2 {
			continue // expired since SCAN listed it
		}
		r.Keys++
		if ttl == -1 {
			r.NoTTL++
			if len(r.NoTTLKeys) < listNoTTL {
				r.NoTTLKeys = append(r.NoTTLKeys, k)
			}
		}
		suffix := other
		if i := strings.LastIndexByte(k, '}'); i >= 0 {
			if _, ok := sfx[k[i+1:]]; ok {
				suffix = k[i+1:]
			}
		}
		r.BySuffix[suffix]++
		pick(k)
	}
	return nil
}

// measure runs MEMORY USAGE on the sample and extrapolates.
func (r *Report) measure(ctx context.Context, sample []sampled) error {
	for _, s := range sample {
		// SAMPLES 0 measures every element of a sorted set exactly.
		v, err := s.node.MemoryUsage(ctx, s.key, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since
		}
		if err != nil {
			return fmt.Errorf("MEMORY USAGE %q: %w", s.key, err)
		}
		r.Sampled++
		r.SampledBytes += v
	}
	if r.Sampled > 0 {
		r.EstimatedBytes = r.SampledBytes * r.Keys / r.Sampled
	}
	return nil
}

// truncated matches SLOWLOG's shortened arguments: the first 128 bytes,
// then "... (N more bytes)".
var truncated = regexp.MustCompile(`(?s)^(.{128})\.\.\. \((\d+) more bytes\)$`)

// matchScript returns the name of the limitkit script a SLOWLOG entry ran,
// or "".
func matchScript(args []string, known []script) string {
	if len(args) < 2 {
		return ""
	}
	switch strings.ToUpper(args[0]) {
	case "EVALSHA", "EVALSHA_RO":
		sha := strings.ToLower(args[1])
		for _, s := range known {
			if s.sha == sha {
				return s.name
			}
		}
	case "EVAL", "EVAL_RO":
		body := args[1]
		for _, s := range known {
			if s.body == body {
				return s.name
			}
		}
		if m := truncated.FindStringSubmatch(body); m != nil {
			more, err := strconv.Atoi(m[2])
			if err != nil {
				return ""
			}
			for _, s := range known {
				if len(s.body) == len(m[1])+more && strings.HasPrefix(s.body, m[1]) {
					return s.name
				}
			}
		}
	}
	return ""
}

// readSlowlog adds n's SLOWLOG entries of limitkit scripts to the report.
func (r *Report) readSlowlog(ctx context.Context, n *redis.Client, count int64) error {
	if count == 0 {
		return nil
	}
	entries, err := n.SlowLogGet(ctx, count).Result()
	if err != nil {
		return fmt.Errorf("SLOWLOG GET on %s: %w", n.Options().Addr, err)
	}
	r.SlowlogRead += len(entries)
	known := scripts()
	for _, e := range entries {
		name := matchScript(e.Args, known)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(r.Slow, func(s SlowScript) bool { return s.Script == name })
		if i < 0 {
			r.Slow = append(r.Slow, SlowScript{Script: name})
			i = len(r.Slow) - 1
		}
		r.Slow[i].Entries++
		r.Slow[i].Slowest = max(r.Slow[i].Slowest, e.Duration)
	}
	slices.SortFunc(r.Slow, func(a, b SlowScript) int { return strings.Compare(a.Script, b.Script) })
	return nil
}

// evictionSettings reads n's maxmemory settings and says how they endanger
// limiter keys.
func evictionSettings(ctx context.Context, n *redis.Client) Node {
	node := Node{Addr: n.Options().Addr}
	vals, err := n.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		node.ConfigErr = err.Error()
		return node
	}
	node.MaxmemoryPolicy = vals["maxmemory-policy"]
	node.Maxmemory, _ = strconv.ParseInt(vals["maxmemory"], 10, 64)
	node.Warning = evictionWarning(node.MaxmemoryPolicy, node.Maxmemory)
	return node
}

// evictionWarning says how a maxmemory policy endangers limiter keys.
func evictionWarning(policy string, maxmemory int64) string {
	switch {
	case strings.HasPrefix(policy, "allkeys-"):
		return "Redis may evict limiter keys when memory is full, and an evicted key gets its full allowance back; " +
			"use a Redis of its own for limits, or noeviction"
	case strings.HasPrefix(policy, "volatile-"):
		return "Redis may evict keys with a TTL when memory is full, and every limiter key has one: an evicted key " +
			"gets its full allowance back; use noeviction"
	case policy == "noeviction" && maxmemory > 0:
		return "when memory is full Redis refuses writes (OOM): every decision fails, and is made by the fallback " +
			"store's policy, if any; watch used_memory against maxmemory"
	}
	return ""
}

// print writes the report for a person.
func (r *Report) print(out io.Writer) {
	addrs := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		addrs[i] = n.Addr
	}
	fmt.Fprintf(out, "limitkit keys under %q on %s\n", r.Prefix, strings.Join(addrs, ", "))
	more := ""
	if r.Truncated {
		more = " (scanning stopped at -max-keys; there are more)"
	}
	fmt.Fprintf(out, "\nkeys: %d%s\n", r.Keys, more)
	for _, name := range algorithms.Names() {
		s := algorithms.Rule{Algorithm: name}.KeySuffix()
		fmt.Fprintf(out, "  %-16s %-5s %d\n", name, s, r.BySuffix[s])
	}
	fmt.Fprintf(out, "  %-22s %d\n", "other", r.BySuffix[other])

	fmt.Fprintln(out, "\nmemory:")
	if r.Sampled == 0 {
		fmt.Fprintln(out, "  no key measured")
	} else {
		fmt.Fprintf(out, "  %d bytes in %d sampled keys (%d bytes each on average)\n", r.SampledBytes, r.Sampled, r.SampledBytes/r.Sampled)
		fmt.Fprintf(out, "  about %d bytes for all %d keys\n", r.EstimatedBytes, r.Keys)
	}

	fmt.Fprintf(out, "\nkeys without a TTL: %d\n", r.NoTTL)
	if r.NoTTL > 0 {
		fmt.Fprintln(out, "  WARNING: limitkit always sets an expiry; these were written by hand or by a bug, and never expire:")
		for _, k := range r.NoTTLKeys {
			fmt.Fprintf(out, "    %q\n", k)
		}
	}

	fmt.Fprintf(out, "\nSLOWLOG: %d limitkit script entries among the %d read\n", sum(r.Slow), r.SlowlogRead)
	for _, s := range r.Slow {
		fmt.Fprintf(out, "  %-16s %d entries, slowest %v\n", s.Script, s.Entries, s.Slowest)
	}

	fmt.Fprintln(out, "\neviction:")
	for _, n := range r.Nodes {
		if n.ConfigErr != "" {
			fmt.Fprintf(out, "  %s: CONFIG GET failed (%s); check maxmemory-policy another way\n", n.Addr, n.ConfigErr)
			continue
		}
		fmt.Fprintf(out, "  %s: maxmemory-policy %s, maxmemory %d\n", n.Addr, n.MaxmemoryPolicy, n.Maxmemory)
		if n.Warning != "" {
			fmt.Fprintf(out, "    WARNING: %s\n", n.Warning)
		}
	}
}

func sum(s []SlowScript) int {
	n := 0
	for _, e := range s {
		n += e.Entries
	}
	return n
}

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

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

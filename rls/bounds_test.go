package rls

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// aliasBomb is a small file whose YAML aliases expand to 10^levels
// descriptors: anchors under the ignored metadata key, each level a list of
// ten descriptors whose descriptors point at the level below.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    metadata:\n")
	for l := 0; l < levels; l++ {
		fmt.Fprintf(&b, "      l%d: &l%d [", l, l)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			if l == 0 {
				fmt.Fprintf(&b, "{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}", i)
			} else {
				fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}", i, l-1)
			}
		}
		b.WriteString("]\n")
	}
	fmt.Fprintf(&b, "    descriptors: *l%d\n", levels-1)
	return b.String()
}

// TestAliasBombRefused: aliases expanding past maxAliasExpansion are
// refused, naming the file; the control, a file reusing anchors within the
// budget, loads with every expanded descriptor.
func TestAliasBombRefused(t *testing.T) {
	for _, levels := range []int{6, 10} {
		_, err := ParseConfig("bomb.yaml", []byte(aliasBomb(levels)))
		if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), "bomb.yaml:") || !strings.Contains(err.Error(), "YAML aliases expand") {
			t.Fatalf("%d levels: %v; want a refusal naming bomb.yaml and the aliases", levels, err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("%d levels: an error of %d bytes; want one short line", levels, len(err.Error()))
		}
	}
	if n := len(aliasBomb(10)); n > 4096 {
		t.Fatalf("the 10-level file is %d bytes; want a few kilobytes", n)
	}
	// Control: 10^4 descriptors through aliases are within the budget.
	cfg, err := ParseConfig("reuse.yaml", []byte(aliasBomb(4)))
	if err != nil {
		t.Fatalf("4 levels of reuse: %v", err)
	}
	count := 0
	var walk func([]*Descriptor)
	walk = func(ds []*Descriptor) {
		for _, d := range ds {
			count++
			walk(d.Descriptors)
		}
	}
	walk(cfg.Descriptors)
	if want := 1 + 10 + 100 + 1000 + 10000; count != want {
		t.Fatalf("%d descriptors, want %d", count, want)
	}
}

// chain is a file of one descriptor per level, depth levels deep, each key
// keyLen bytes, the deepest with rate_limit.
func chain(depth, keyLen int, limit string) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors: ")
	key := strings.Repeat("k", keyLen)
	for i := 1; i < depth; i++ {
		fmt.Fprintf(&b, "[{key: %s, descriptors: ", key)
	}
	fmt.Fprintf(&b, "[{key: %s, rate_limit: %s}]", key, limit)
	b.WriteString(strings.Repeat("}]", depth-1))
	b.WriteString("\n")
	return b.String()
}

// TestDeepDescriptors: nesting the reference reads is accepted (it has no
// bound but its YAML parser's); an error deep in the tree stays short; the
// full keys of a deep tree of long keys are bounded.
func TestDeepDescriptors(t *testing.T) {
	for _, depth := range []int{65, 1000, 4000} {
		cfg, err := ParseConfig("deep.yaml", []byte(chain(depth, 1, "{unit: second, requests_per_unit: 1}")))
		if err != nil {
			t.Fatalf("%d levels: %v", depth, err)
		}
		got := 0
		for ds := cfg.Descriptors; len(ds) > 0; ds = ds[0].Descriptors {
			got++
		}
		if got != depth {
			t.Fatalf("%d levels read as %d", depth, got)
		}
		if _, err := Compile(cfg); err != nil {
			t.Fatalf("%d levels: compile: %v", depth, err)
		}
	}
	_, err := ParseConfig("deep.yaml", []byte(chain(100, 1, "{unit: minutes}")))
	if err == nil || !strings.Contains(err.Error(), "level 100 descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes'") {
		t.Fatalf("an error at level 100: %v", err)
	}
	if len(err.Error()) > 300 {
		t.Fatalf("an error at level 100 is %d bytes: %.200s...", len(err.Error()), err)
	}
	_, err = ParseConfig("long.yaml", []byte(chain(2000, 100, "{unit: second, requests_per_unit: 1}")))
	if err == nil || !strings.Contains(err.Error(), "full keys") {
		t.Fatalf("2000 levels of 100-byte keys: %v; want the full keys refused", err)
	}
}

// TestUnitMultiplierOverflow: a multiplier whose window passes what a
// Duration holds is refused as too long, not as a negative window.
func TestUnitMultiplierOverflow(t *testing.T) {
	for _, m := range []string{"2", "1000", "4294967295"} {
		_, err := ParseConfig("c.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: "+m+"}\n"))
		want := "descriptors[0].rate_limit.unit_multiplier: the window year x " + m + " is longer than 366 days"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("multiplier %s: %v; want %q", m, err, want)
		}
	}
	if w := (Limit{Unit: rlsv3.RateLimitResponse_RateLimit_YEAR, UnitMultiplier: 1 << 31}).Window(); w <= 0 {
		t.Errorf("Window of year x 2^31 is %v; want the longest Duration", w)
	}
}

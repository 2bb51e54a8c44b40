package rls

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Rules is a compiled configuration: every domain's descriptor tree, ready
// to match requests. It is immutable and safe for concurrent use; a
// Service swaps one for another with SetRules.
type Rules struct {
	domains map[string]*node
	files   []string
}

// node is one level of a compiled descriptor tree.
type node struct {
	children  map[string]*node // by "key_value", or "key" alone
	wildcards []wildcard       // the children whose value holds '*', in file order
	limits    []*rule
	unlimited bool
	shadow    bool
	detailed  bool
	// statKey names the rule in statistics: the domain and the path of
	// the config's keys and values, as the reference server's.
	statKey string
}

// wildcard is a child whose "key_value" holds '*', split on it.
type wildcard struct {
	key   string
	parts []string
}

// rule is one compiled limit.
type rule struct {
	limit   Limit
	alg     algorithms.Rule
	current *rlsv3.RateLimitResponse_RateLimit
	// prefix keeps the states of limits of one descriptor apart: their
	// windows differ (two of one algorithm and window are refused).
	prefix    string
	shadow    bool
	detailed  bool
	statKey   string
	onFailure backend.FailurePolicy
}

// NewRules parses files and compiles their domains. A domain defined in
// two files is refused, as by the reference server. The error is a
// *ConfigError.
func NewRules(files ...File) (*Rules, error) {
	configs := make([]*DomainConfig, 0, len(files))
	for _, f := range files {
		c, err := ParseConfig(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		configs = append(configs, c)
	}
	return Compile(configs...)
}

// Compile compiles parsed configurations into Rules. The error is a
// *ConfigError.
func Compile(configs ...*DomainConfig) (*Rules, error) {
	r := &Rules{domains: make(map[string]*node, len(configs))}
	from := make(map[string]string, len(configs))
	for _, c := range configs {
		if c == nil || c.Domain == "" {
			return nil, &ConfigError{File: fileOf(c), Path: "domain", Err: fmt.Errorf("config file cannot have empty domain; write domain: NAME")}
		}
		if first, dup := from[c.Domain]; dup {
			return nil, &ConfigError{File: c.File, Path: "domain", Err: fmt.Errorf("duplicate domain '%s' in config file (also in %s); merge the two files or rename one domain",
				shorten(c.Domain), first)}
		}
		from[c.Domain] = c.File
		root := &node{statKey: c.Domain}
		if err := compileLevel(c, root, c.Descriptors, c.Domain+"."); err != nil {
			return nil, err
		}
		r.domains[c.Domain] = root
		r.files = append(r.files, c.File)
	}
	return r, nil
}

func fileOf(c *DomainConfig) string {
	if c == nil {
		return "(nil config)"
	}
	return c.File
}

func compileLevel(c *DomainConfig, parent *node, ds []*Descriptor, statPrefix string) error {
	parent.children = make(map[string]*node, len(ds))
	for _, d := range ds {
		if d == nil || d.Key == "" {
			return &ConfigError{File: c.File, Line: lineOf(d), Err: fmt.Errorf("descriptor has empty key; write key: NAME")}
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		if _, dup := parent.children[composite]; dup {
			return &ConfigError{File: c.File, Line: d.Line, Err: fmt.Errorf("duplicate descriptor composite key '%s'; merge the two", shorten(statPrefix+composite))}
		}
		n := &node{unlimited: d.Unlimited, shadow: d.ShadowMode, detailed: d.DetailedMetric, statKey: statPrefix + composite}
		windows := map[string]int{}
		for _, l := range d.Limits {
			ru, err := compileLimit(c, n, l)
			if err != nil {
				return err
			}
			if line, dup := windows[ru.prefix+string(ru.alg.Algorithm)]; dup {
				return &ConfigError{File: c.File, Line: l.Line, Err: fmt.Errorf("two %s limits of one window on one descriptor (the other at line %d); keep the smaller one", ru.alg.Algorithm, line)}
			}
			windows[ru.prefix+string(ru.alg.Algorithm)] = l.Line
			n.limits = append(n.limits, ru)
		}
		if strings.Contains(composite, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{key: composite, parts: strings.Split(composite, "*")})
		}
		parent.children[composite] = n
		if err := compileLevel(c, n, d.Descriptors, n.statKey+"."); err != nil {
			return err
		}
	}
	return nil
}

func lineOf(d *Descriptor) int {
	if d == nil {
		return 0
	}
	return d.Line
}

func compileLimit(c *DomainConfig, n *node, l Limit) (*rule, error) {
	if l.Algorithm == "" {
		l.Algorithm = algorithms.FixedWindow
	}
	if unitLength(l.Unit) == 0 {
		return nil, &ConfigError{File: c.File, Line: l.Line, Err: fmt.Errorf("invalid rate limit unit '%s'; write second, minute, hour, day, week, month or year", l.Unit)}
	}
	ru := &rule{
		limit:     l,
		alg:       algorithms.Rule{Algorithm: l.Algorithm, Limit: int64(l.RequestsPerUnit), Window: l.Window()},
		prefix:    "rls:" + strconv.FormatInt(l.Window().Milliseconds(), 10) + ":",
		shadow:    n.shadow,
		detailed:  n.detailed,
		statKey:   n.statKey,
		onFailure: l.OnFailure,
		current:   &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit},
	}
	if l.UnitMultiplier > 1 {
		ru.current.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	if a := algorithms.Lookup(l.Algorithm); a == nil || a.HoldsLeases() {
		return nil, &ConfigError{File: c.File, Line: l.Line, Err: fmt.Errorf("algorithm '%s' is not a rate algorithm; write fixed_window, sliding_log, sliding_counter, compact_log, two_level or gcra", shorten(string(l.Algorithm)))}
	}
	if l.RequestsPerUnit > 0 {
		if err := ru.alg.Validate(); err != nil {
			return nil, &ConfigError{File: c.File, Line: l.Line, Err: err}
		}
	}
	return ru, nil
}

// Domains returns the configured domains, sorted.
func (r *Rules) Domains() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// lookup finds the rule a request descriptor matches in domain, with the
// reference server's rules: at each entry the exact key_value, then the
// first wildcard that matches key_value, then the key alone; the rule
// applies only when the descriptor's last entry reached it.
func (r *Rules) lookup(domain string, d *ratelimitv3.RateLimitDescriptor) *node {
	if r == nil {
		return nil
	}
	level := r.domains[domain]
	entries := d.GetEntries()
	if level == nil || len(entries) == 0 {
		return nil
	}
	for i, e := range entries {
		composite := e.GetKey() + "_" + e.GetValue()
		next := level.children[composite]
		if next == nil {
			for _, w := range level.wildcards {
				if wildcardMatch(w.parts, composite) {
					next = level.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.GetKey()]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			if len(next.limits) == 0 && !next.unlimited {
				return nil
			}
			return next
		}
		if len(next.children) == 0 {
			return nil
		}
		level = next
	}
	return nil
}

// wildcardMatch reports whether value matches a pattern split on '*',
// each '*' matching any run of characters (none included).
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

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
	"github.com/limitkit/limitkit/limiter/configtree"
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
	// share: the value is a wildcard whose matches count on one counter
	// (share_threshold); valueToMetric: statistics carry the request's
	// value here (value_to_metric).
	share         bool
	valueToMetric bool
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
	quota     bool
	detailed  bool
	statKey   string
	onFailure backend.FailurePolicy
	// override: a limit the request carried (Envoy's limit override),
	// counted under a fixed prefix with its window in the key id, so that
	// the prefix (a metric label) stays one value whatever windows
	// clients send.
	override bool
}

// NewRules parses files and compiles their domains. A domain defined in
// two files is refused, as by the reference server. The error is a
// *ConfigError.
func NewRules(files ...File) (*Rules, error) {
	configs, err := parseFiles(files)
	if err != nil {
		return nil, err
	}
	return Compile(configs...)
}

// NewMergedRules is NewRules merging the files of one domain into one
// tree, as the reference does under MERGE_DOMAIN_CONFIG=true: a
// descriptor defined in two of them is refused (duplicate composite key).
func NewMergedRules(files ...File) (*Rules, error) {
	configs, err := parseFiles(files)
	if err != nil {
		return nil, err
	}
	return compile(true, configs)
}

// parseFiles parses every file, stopping at the first that fails.
func parseFiles(files []File) ([]*DomainConfig, error) {
	configs := make([]*DomainConfig, 0, len(files))
	for _, f := range files {
		c, err := ParseConfig(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		configs = append(configs, c)
	}
	return configs, nil
}

// Compile compiles parsed configurations into Rules. The error is a
// *ConfigError.
func Compile(configs ...*DomainConfig) (*Rules, error) { return compile(false, configs) }

func compile(merge bool, configs []*DomainConfig) (*Rules, error) {
	r := &Rules{domains: make(map[string]*node, len(configs))}
	from := make(map[string]string, len(configs))
	for _, c := range configs {
		if c == nil || c.Domain == "" {
			return nil, &ConfigError{File: fileOf(c), Path: "domain", Err: fmt.Errorf("config file cannot have empty domain; write domain: NAME")}
		}
		if root := r.domains[c.Domain]; root != nil && merge {
			if err := compileLevel(c, root, c.Descriptors, c.Domain+"."); err != nil {
				return nil, err
			}
			r.files = append(r.files, c.File)
			continue
		}
		if first, dup := from[c.Domain]; dup {
			return nil, &ConfigError{File: c.File, Path: "domain", Err: fmt.Errorf("duplicate domain '%s' in config file (also in %s); merge the two files or rename one domain",
				configtree.Shorten(c.Domain), first)}
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
	if parent.children == nil {
		parent.children = make(map[string]*node, len(ds))
	}
	for _, d := range ds {
		if d == nil || d.Key == "" {
			return &ConfigError{File: c.File, Line: lineOf(d), Err: fmt.Errorf("descriptor has empty key; write key: NAME")}
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		if _, dup := parent.children[composite]; dup {
			return &ConfigError{File: c.File, Line: d.Line, Err: fmt.Errorf("duplicate descriptor composite key '%s'; merge the two", configtree.Shorten(statPrefix+composite))}
		}
		if d.ShareThreshold && !strings.Contains(composite, "*") {
			return &ConfigError{File: c.File, Line: d.Line, Err: fmt.Errorf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'; add a '*' to the value or remove share_threshold",
				configtree.Shorten(composite))}
		}
		n := &node{unlimited: d.Unlimited, shadow: d.ShadowMode, detailed: d.DetailedMetric, share: d.ShareThreshold,
			valueToMetric: d.ValueToMetric, statKey: statPrefix + composite}
		quota := d.QuotaMode
		windows := map[string]int{}
		for _, l := range d.Limits {
			ru, err := compileLimit(c, n, l)
			if err != nil {
				return err
			}
			ru.quota = quota
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
		return nil, &ConfigError{File: c.File, Line: l.Line, Err: fmt.Errorf("algorithm '%s' is not a rate algorithm; write fixed_window, sliding_log, sliding_counter, compact_log, two_level or gcra", configtree.Shorten(string(l.Algorithm)))}
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

// match is what a request descriptor matched: the rule's node, the
// wildcard values to count under in place of the request's (share
// threshold, by entry; nil when none) and the reference's statistics key
// for the path when it differs from the node's (value_to_metric, or
// share_threshold under detailed_metric).
type match struct {
	node    *node
	shared  []string
	statKey string
}

// step is how one entry of a request descriptor matched: the node, the
// wildcard value it matched ("" when exact or by key alone), and whether
// it matched by key alone.
type step struct {
	node  *node
	wild  string
	byKey bool
}

// lookup finds the rule a request descriptor matches in domain, with the
// reference server's rules: at each entry the exact key_value, then the
// first wildcard that matches key_value, then the key alone; the rule
// applies only when the descriptor's last entry reached it.
func (r *Rules) lookup(domain string, d *ratelimitv3.RateLimitDescriptor) match {
	if r == nil {
		return match{}
	}
	level := r.domains[domain]
	entries := d.GetEntries()
	if level == nil || len(entries) == 0 {
		return match{}
	}
	var buf [8]step
	steps := buf[:0]
	for i, e := range entries {
		composite := e.GetKey() + "_" + e.GetValue()
		st := step{node: level.children[composite]}
		if st.node == nil {
			for _, w := range level.wildcards {
				if wildcardMatch(w.parts, composite) {
					st.node = level.children[w.key]
					st.wild = strings.TrimPrefix(w.key, e.GetKey()+"_")
					break
				}
			}
		}
		if st.node == nil {
			st.node, st.byKey = level.children[e.GetKey()], true
		}
		if st.node == nil {
			return match{}
		}
		steps = append(steps, st)
		if i == len(entries)-1 {
			if len(st.node.limits) == 0 && !st.node.unlimited {
				return match{}
			}
			return matchOf(domain, entries, steps)
		}
		if len(st.node.children) == 0 {
			return match{}
		}
		level = st.node
	}
	return match{}
}

// matchOf builds the match of a path that reached a rule: the shared
// values, and the reference's statistics key when it differs from the
// leaf's own. Under detailed_metric with shared values, each shared entry
// is named by its wildcard and the others by key_value; without
// detailed_metric, with value_to_metric on the path, each entry by its key
// and the value the reference puts there: a shared wildcard, the request's
// value where value_to_metric is set, else the config's value.
func matchOf(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, steps []step) match {
	leaf := steps[len(steps)-1].node
	m := match{node: leaf}
	valueToMetric := false
	for i, st := range steps {
		if st.wild != "" && st.node.share {
			if m.shared == nil {
				m.shared = make([]string, len(steps))
			}
			m.shared[i] = st.wild
		}
		valueToMetric = valueToMetric || st.node.valueToMetric
	}
	if leaf.detailed && m.shared == nil || !leaf.detailed && !valueToMetric {
		return m
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		st := steps[i]
		value := ""
		switch {
		case m.shared != nil && m.shared[i] != "":
			value = m.shared[i]
		case leaf.detailed:
			value = e.GetValue()
		case st.wild != "" && st.node.valueToMetric:
			value = e.GetValue()
		case st.wild != "":
			value = st.wild
		case !st.byKey || st.node.valueToMetric:
			value = e.GetValue()
		}
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if value != "" {
			b.WriteByte('_')
			b.WriteString(value)
		}
	}
	m.statKey = b.String()
	return m
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

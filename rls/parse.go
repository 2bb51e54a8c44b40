package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// The keys each level of the reference format accepts. metadata is the
// reference's (dynamic metadata) and accepted without effect here.
var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric",
		"quota_mode", "value_to_metric", "share_threshold", "metadata"}
	limitKeys = []string{"requests_per_unit", "unit", "unlimited", "name", "replaces",
		"algorithm", "unit_multiplier", "on_failure"}
	replacesKeys = []string{"name"}
)

// Bounds on what one file costs to walk. A YAML alias is a pointer: the
// walk follows it, so a few kilobytes of anchors pointing at lists of
// anchors (an "alias bomb") would build billions of descriptors. The
// walk counts the mappings it reaches through aliases and stops past
// maxAliasExpansion, as limiter/config stops a document past its
// settings.MaxNodes values. maxDepth accepts every nesting the reference
// reads (its YAML parser, like ours, stops at 10,000 levels: a descriptor
// level is two, a list and a mapping). maxKeyBytes bounds the full keys of
// the tree (each descriptor's is its parents' keys and its own), which grow
// with the square of the depth.
const (
	maxAliasExpansion = 100_000
	maxDepth          = 5_000
	maxKeyBytes       = 64 << 20
	// elideDepth is the depth past which paths in errors leave out the
	// middle levels: an error stays one short line at any depth.
	elideDepth = 4
)

// parser reads one file, keeping its name for errors.
type parser struct {
	file string
	// aliased is how many aliases the walk is under; expanded counts the
	// mappings reached through one.
	aliased, expanded int
	// keyBytes sums the full keys of the descriptors read.
	keyBytes int
	// head is the path of the descriptor at elideDepth being walked.
	head string
}

// follow enters n, counting it when it is an alias; call the returned
// function when leaving it.
func (p *parser) follow(n *yaml.Node) func() {
	if n.Kind != yaml.AliasNode {
		return func() {}
	}
	p.aliased++
	return func() { p.aliased-- }
}

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Path: path, Err: fmt.Errorf(format, args...)}
}

// ParseConfig reads one YAML file of the reference server's format. name
// is the file's name in errors. The error is a *ConfigError.
func ParseConfig(name string, data []byte) (*DomainConfig, error) {
	p := &parser{file: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errorf(nil, "", "the file is empty; write a domain and its descriptors")
		}
		return nil, &ConfigError{File: name, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		at := &extra
		if len(extra.Content) > 0 {
			at = extra.Content[0]
		}
		return nil, p.errorf(at, "", "a second YAML document (after ---); write one domain per file")
	} else if !errors.Is(err, io.EOF) {
		return nil, &ConfigError{File: name, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	fields, err := p.mapping(root, "", rootKeys)
	if err != nil {
		return nil, err
	}
	cfg := &DomainConfig{File: name}
	if n := fields["domain"]; n != nil {
		if cfg.Domain, err = p.str(n, "domain"); err != nil {
			return nil, err
		}
	}
	if cfg.Domain == "" {
		return nil, p.errorf(root, "domain", "the domain is empty; write domain: NAME, the domain Envoy's filter sends")
	}
	if n := fields["descriptors"]; n != nil {
		if cfg.Descriptors, err = p.descriptors(n, "descriptors", 1, 0); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// mapping checks that n is a mapping of the allowed keys, each once, and
// returns its values by key. A null node is an empty mapping.
func (p *parser) mapping(n *yaml.Node, path string, allowed []string) (map[string]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode || p.aliased > 0 {
		p.expanded++
		if p.expanded > maxAliasExpansion {
			return nil, p.errorf(n, path, "YAML aliases expand to more than %d mappings; write the descriptors out, or reuse fewer anchors", maxAliasExpansion)
		}
	}
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return map[string]*yaml.Node{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, path, "expected a mapping of %s, found %s", strings.Join(allowed, ", "), kind(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		at := join(path, k.Value)
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, p.errorf(k, path, "config error, key is not of type string: %s; write one of %s", shorten(k.Value), strings.Join(allowed, ", "))
		}
		if !contains(allowed, k.Value) {
			return nil, p.errorf(k, path, "config error, unknown key '%s'; write one of %s", shorten(k.Value), strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errorf(k, at, "written twice at one level; keep one")
		}
		out[k.Value] = v
	}
	return out, nil
}

func (p *parser) descriptors(n *yaml.Node, path string, depth int, keyLen int) ([]*Descriptor, error) {
	defer p.follow(n)()
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "expected a list of descriptors (- key: ...), found %s", kind(n))
	}
	if depth > maxDepth {
		return nil, p.errorf(n, path, "descriptors nested more than %d deep; flatten the tree", maxDepth)
	}
	if depth > elideDepth {
		path = fmt.Sprintf("%s ... level %d descriptors", p.head, depth)
	}
	out := make([]*Descriptor, 0, len(n.Content))
	seen := make(map[string]int, len(n.Content))
	for i, item := range n.Content {
		at := fmt.Sprintf("%s[%d]", path, i)
		if depth == elideDepth {
			p.head = at
		}
		d, err := p.descriptor(item, at, depth, keyLen)
		if err != nil {
			return nil, err
		}
		composite := d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		if first, dup := seen[composite]; dup {
			return nil, p.errorf(item, at, "duplicate descriptor composite key '%s' (also at %s[%d]); merge the two or give them different values",
				shorten(composite), path, first)
		}
		seen[composite] = i
		out = append(out, d)
	}
	return out, nil
}

func (p *parser) descriptor(n *yaml.Node, path string, depth int, keyLen int) (*Descriptor, error) {
	defer p.follow(n)()
	fields, err := p.mapping(n, path, descriptorKeys)
	if err != nil {
		return nil, err
	}
	d := &Descriptor{Line: resolve(n).Line}
	if v := fields["key"]; v != nil {
		if d.Key, err = p.str(v, join(path, "key")); err != nil {
			return nil, err
		}
	}
	if d.Key == "" {
		return nil, p.errorf(n, join(path, "key"), "descriptor has empty key; write key: NAME, as the descriptor entry Envoy sends")
	}
	if v := fields["value"]; v != nil {
		if d.Value, err = p.str(v, join(path, "value")); err != nil {
			return nil, err
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shadow_mode", &d.ShadowMode}, {"detailed_metric", &d.DetailedMetric}, {"quota_mode", &d.QuotaMode}, {"value_to_metric", &d.ValueToMetric}, {"share_threshold", &d.ShareThreshold}} {
		if v := fields[b.key]; v != nil {
			x, err := p.boolean(v, join(path, b.key))
			if err != nil {
				return nil, err
			}
			if b.dst != nil {
				*b.dst = x
			}
		}
	}
	if v := fields["rate_limit"]; v != nil && !isNull(v) {
		l, unlimited, err := p.limit(v, join(path, "rate_limit"), true)
		if err != nil {
			return nil, err
		}
		if unlimited {
			d.Unlimited = true
		} else {
			d.Limits = append(d.Limits, l)
		}
	}
	if v := fields["rate_limits"]; v != nil && !isNull(v) {
		at := join(path, "rate_limits")
		list := resolve(v)
		if list.Kind != yaml.SequenceNode {
			return nil, p.errorf(list, at, "expected a list of limits (- unit: ...), found %s", kind(list))
		}
		if d.Unlimited && len(list.Content) > 0 {
			return nil, p.errorf(list, at, "the descriptor is unlimited; remove rate_limits or unlimited")
		}
		for i, item := range list.Content {
			l, _, err := p.limit(item, fmt.Sprintf("%s[%d]", at, i), false)
			if err != nil {
				return nil, err
			}
			d.Limits = append(d.Limits, l)
		}
	}
	if len(d.Limits) > maxLimitsPerDescriptor {
		return nil, p.errorf(n, path, "%d limits on one descriptor; at most %d", len(d.Limits), maxLimitsPerDescriptor)
	}
	// The full key, as statistics name it: the parents' and this one's.
	keyLen += len(d.Key) + len(d.Value) + 2
	p.keyBytes += keyLen
	if p.keyBytes > maxKeyBytes {
		return nil, p.errorf(n, path, "the descriptors' full keys (each its parents' and its own) pass %d MiB; use shorter keys or a shallower tree", maxKeyBytes>>20)
	}
	if v := fields["descriptors"]; v != nil {
		if d.Descriptors, err = p.descriptors(v, join(path, "descriptors"), depth+1, keyLen); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// maxLimitsPerDescriptor bounds rate_limit plus rate_limits, so that a
// request of a few descriptors fits one TakeAll (backend.MaxRequests).
const maxLimitsPerDescriptor = 4

// limit reads a rate_limit (single) or an entry of rate_limits. It
// reports unlimited: true instead of a limit.
func (p *parser) limit(n *yaml.Node, path string, single bool) (Limit, bool, error) {
	defer p.follow(n)()
	fields, err := p.mapping(n, path, limitKeys)
	if err != nil {
		return Limit{}, false, err
	}
	l := Limit{Line: resolve(n).Line, Algorithm: algorithms.FixedWindow}
	unlimited := false
	if v := fields["unlimited"]; v != nil {
		if unlimited, err = p.boolean(v, join(path, "unlimited")); err != nil {
			return Limit{}, false, err
		}
		if unlimited && !single {
			return Limit{}, false, p.errorf(v, join(path, "unlimited"), "unlimited in rate_limits; write rate_limit: {unlimited: true} alone")
		}
	}
	unitText := ""
	if v := fields["unit"]; v != nil {
		if unitText, err = p.str(v, join(path, "unit")); err != nil {
			return Limit{}, false, err
		}
		value, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unitText)]
		l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(value)
		if !ok || l.Unit == rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
			l.Unit = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
			if !unlimited {
				return Limit{}, false, p.errorf(v, join(path, "unit"), "invalid rate limit unit '%s'; write second, minute, hour, day, week, month or year", shorten(unitText))
			}
		}
	}
	if unlimited {
		if l.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
			return Limit{}, false, p.errorf(fields["unit"], join(path, "unit"), "should not specify rate limit unit when unlimited; remove the unit or unlimited")
		}
		return Limit{}, true, nil
	}
	if l.Unit == rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		return Limit{}, false, p.errorf(n, join(path, "unit"), "invalid rate limit unit ''; write unit: second, minute, hour, day, week, month or year")
	}
	if v := fields["requests_per_unit"]; v != nil {
		x, err := p.uint32(v, join(path, "requests_per_unit"))
		if err != nil {
			return Limit{}, false, err
		}
		l.RequestsPerUnit = x
	}
	if v := fields["unit_multiplier"]; v != nil {
		x, err := p.uint32(v, join(path, "unit_multiplier"))
		if err != nil {
			return Limit{}, false, err
		}
		if x == 0 {
			return Limit{}, false, p.errorf(v, join(path, "unit_multiplier"), "unit_multiplier is 0; write 1 or more (the window is unit x multiplier)")
		}
		// Compared by division: unit x multiplier can pass what a Duration holds.
		if time.Duration(x) > algorithms.MaxWindow/unitLength(l.Unit) {
			return Limit{}, false, p.errorf(v, join(path, "unit_multiplier"), "the window %s x %d is longer than %d days, the longest window; use a smaller multiplier",
				strings.ToLower(l.Unit.String()), x, algorithms.MaxWindow/(24*time.Hour))
		}
		l.UnitMultiplier = x
	}
	if v := fields["algorithm"]; v != nil {
		name, err := p.str(v, join(path, "algorithm"))
		if err != nil {
			return Limit{}, false, err
		}
		a := algorithms.Lookup(algorithms.Name(name))
		var rate []string
		for _, n := range algorithms.Names() {
			if n != algorithms.Concurrency {
				rate = append(rate, string(n))
			}
		}
		if a == nil || a.HoldsLeases() {
			why := "unknown algorithm"
			if a != nil {
				why = "concurrency holds leases, which a rate limit service cannot release"
			}
			return Limit{}, false, p.errorf(v, join(path, "algorithm"), "%s '%s'; write one of %s", why, shorten(name), strings.Join(rate, ", "))
		}
		l.Algorithm = a.Name
	}
	if l.RequestsPerUnit > 0 {
		rule := algorithms.Rule{Algorithm: l.Algorithm, Limit: int64(l.RequestsPerUnit), Window: l.Window()}
		if err := rule.Validate(); err != nil {
			return Limit{}, false, p.errorf(n, path, "%v", strings.TrimPrefix(err.Error(), algorithms.ErrInvalidRule.Error()+": "))
		}
	}
	if v := fields["on_failure"]; v != nil {
		s, err := p.str(v, join(path, "on_failure"))
		if err != nil {
			return Limit{}, false, err
		}
		if l.OnFailure, err = backend.ParseFailurePolicy(s); err != nil {
			return Limit{}, false, p.errorf(v, join(path, "on_failure"), "%v", err)
		}
	}
	if v := fields["name"]; v != nil {
		if l.Name, err = p.str(v, join(path, "name")); err != nil {
			return Limit{}, false, err
		}
	}
	if v := fields["replaces"]; v != nil && !isNull(v) {
		at := join(path, "replaces")
		list := resolve(v)
		if list.Kind != yaml.SequenceNode {
			return Limit{}, false, p.errorf(list, at, "expected a list of - name: NAME, found %s", kind(list))
		}
		for i, item := range list.Content {
			ia := fmt.Sprintf("%s[%d]", at, i)
			f, err := p.mapping(item, ia, replacesKeys)
			if err != nil {
				return Limit{}, false, err
			}
			name := ""
			if f["name"] != nil {
				if name, err = p.str(f["name"], join(ia, "name")); err != nil {
					return Limit{}, false, err
				}
			}
			if name == "" {
				return Limit{}, false, p.errorf(item, ia, "should not have an empty replaces entry; write - name: NAME")
			}
			if name == l.Name {
				return Limit{}, false, p.errorf(item, ia, "replaces should not contain name of same descriptor '%s'", shorten(name))
			}
			l.Replaces = append(l.Replaces, name)
		}
	}
	return l, false, nil
}

func (p *parser) str(n *yaml.Node, path string) (string, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return "", p.errorf(n, path, "expected a string, found %s", kind(n))
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, p.errorf(n, path, "expected true or false, found %s", kind(n))
}

func (p *parser) uint32(n *yaml.Node, path string) (uint32, error) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil && v >= 0 && v <= math.MaxUint32 {
			return uint32(v), nil
		}
	}
	return 0, p.errorf(n, path, "expected a whole number from 0 to %d, found %s", uint32(math.MaxUint32), kind(n))
}

// resolve follows an alias.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kind describes a node for an error, quoting a short scalar.
func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(shorten(n.Value))
	}
	return "something else"
}

// shorten bounds user text echoed in an error.
func shorten(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "..."
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

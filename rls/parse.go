package rls

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/limiter/configtree/yamltree"
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

// Bounds on what one file costs to read. A YAML alias is a pointer: a few
// kilobytes of anchors pointing at lists of anchors (an "alias bomb")
// stand for billions of descriptors. The reader (limiter/configtree/yamltree)
// shares an alias's node instead of copying it and refuses a file whose
// aliases stand for more than maxAliasExpansion values (the control file
// of TestAliasBombRefused, 10^4 descriptors through aliases, is about
// 112,000); a file without aliases is bounded by its size
// (runtimedir.MaxFileBytes). maxDepth accepts every nesting the reference
// reads (its YAML parser, like ours, stops at 10,000 levels: a descriptor
// level is two, a list and a mapping). maxKeyBytes bounds the full keys of
// the tree (each descriptor's is its parents' keys and its own), which grow
// with the square of the depth.
const (
	maxAliasExpansion = 1_000_000
	maxDepth          = 5_000
	maxKeyBytes       = 64 << 20
	// elideDepth is the depth past which paths in errors leave out the
	// middle levels: an error stays one short line at any depth.
	elideDepth = 4
)

// fileLimits are a rate limit file's bounds on the reader.
var fileLimits = configtree.Limits{MaxAliased: maxAliasExpansion}

// parser reads one file, keeping its name for errors.
type parser struct {
	file string
	// keyBytes sums the full keys of the descriptors read.
	keyBytes int
	// head is the path of the descriptor at elideDepth being walked.
	head string
}

// fields are a mapping's values by key.
type fields map[string]*configtree.Node

func (p *parser) errorf(n *configtree.Node, path, format string, args ...any) error {
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
	root, err := yamltree.Parse(data, fileLimits)
	if err != nil {
		return nil, p.readError(err)
	}
	fs, err := p.mapping(root, "", rootKeys)
	if err != nil {
		return nil, err
	}
	cfg := &DomainConfig{File: name}
	if cfg.Domain, err = p.str(fs["domain"], "domain"); err != nil {
		return nil, err
	}
	if cfg.Domain == "" {
		return nil, p.errorf(root, "domain", "the domain is empty; write domain: NAME, the domain Envoy's filter sends")
	}
	if n := fs["descriptors"]; n != nil {
		if cfg.Descriptors, err = p.descriptors(n, "descriptors", 1, 0); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// readError turns the reader's *configtree.Error into a *ConfigError.
func (p *parser) readError(err error) error {
	var te *configtree.Error
	if !errors.As(err, &te) {
		return &ConfigError{File: p.file, Err: err}
	}
	if errors.Is(te.Err, configtree.ErrEmpty) {
		return &ConfigError{File: p.file, Line: te.Line, Err: fmt.Errorf("%w; write a domain and its descriptors", te.Err)}
	}
	return &ConfigError{File: p.file, Line: te.Line, Path: te.Field, Err: te.Err}
}

// mapping checks that n is a mapping of the allowed keys, each once, and
// returns its values by key. A null node is an empty mapping.
func (p *parser) mapping(n *configtree.Node, path string, allowed []string) (fields, error) {
	if isNull(n) {
		return fields{}, nil
	}
	if n.Kind != configtree.MapNode {
		return nil, p.errorf(n, path, "expected a mapping of %s, found %s", strings.Join(allowed, ", "), configtree.Describe(n))
	}
	out := make(fields, len(n.Pairs))
	lines := make(map[string]int, len(n.Pairs))
	for _, f := range n.Pairs {
		at := &configtree.Node{Line: f.KeyLine}
		if f.KeyTag != configtree.StrTag {
			return nil, p.errorf(at, path, "config error, key is not of type string: %s; write one of %s", configtree.Shorten(f.Key), strings.Join(allowed, ", "))
		}
		if !slices.Contains(allowed, f.Key) {
			return nil, p.errorf(at, path, "config error, unknown key '%s'%s; write one of %s",
				configtree.Shorten(f.Key), configtree.DidYouMean(f.Key, allowed), strings.Join(allowed, ", "))
		}
		if line, twice := lines[f.Key]; twice {
			return nil, p.errorf(at, configtree.Join(path, f.Key), "written twice at one level (also on line %d); keep one", line)
		}
		lines[f.Key] = f.KeyLine
		out[f.Key] = f.Val
	}
	return out, nil
}

func (p *parser) descriptors(n *configtree.Node, path string, depth int, keyLen int) ([]*Descriptor, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != configtree.SeqNode {
		return nil, p.errorf(n, path, "expected a list of descriptors (- key: ...), found %s", configtree.Describe(n))
	}
	if depth > maxDepth {
		return nil, p.errorf(n, path, "descriptors nested more than %d deep; flatten the tree", maxDepth)
	}
	if depth > elideDepth {
		path = fmt.Sprintf("%s ... level %d descriptors", p.head, depth)
	}
	out := make([]*Descriptor, 0, len(n.Items))
	seen := make(map[string]int, len(n.Items))
	for i, item := range n.Items {
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
				configtree.Shorten(composite), path, first)
		}
		seen[composite] = i
		out = append(out, d)
	}
	return out, nil
}

func (p *parser) descriptor(n *configtree.Node, path string, depth int, keyLen int) (*Descriptor, error) {
	fs, err := p.mapping(n, path, descriptorKeys)
	if err != nil {
		return nil, err
	}
	d := &Descriptor{Line: n.Line}
	if d.Key, err = p.str(fs["key"], configtree.Join(path, "key")); err != nil {
		return nil, err
	}
	if d.Key == "" {
		return nil, p.errorf(n, configtree.Join(path, "key"), "descriptor has empty key; write key: NAME, as the descriptor entry Envoy sends")
	}
	if d.Value, err = p.str(fs["value"], configtree.Join(path, "value")); err != nil {
		return nil, err
	}
	if err := p.flags(d, fs, path); err != nil {
		return nil, err
	}
	if err := p.limits(d, fs, n, path); err != nil {
		return nil, err
	}
	// The full key, as statistics name it: the parents' and this one's.
	keyLen += len(d.Key) + len(d.Value) + 2
	p.keyBytes += keyLen
	if p.keyBytes > maxKeyBytes {
		return nil, p.errorf(n, path, "the descriptors' full keys (each its parents' and its own) pass %d MiB; use shorter keys or a shallower tree", maxKeyBytes>>20)
	}
	if v := fs["descriptors"]; v != nil {
		if d.Descriptors, err = p.descriptors(v, configtree.Join(path, "descriptors"), depth+1, keyLen); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// flags reads a descriptor's true-or-false fields.
func (p *parser) flags(d *Descriptor, fs fields, path string) error {
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shadow_mode", &d.ShadowMode}, {"detailed_metric", &d.DetailedMetric}, {"quota_mode", &d.QuotaMode}, {"value_to_metric", &d.ValueToMetric}, {"share_threshold", &d.ShareThreshold}} {
		if v := fs[b.key]; v != nil {
			x, err := p.boolean(v, configtree.Join(path, b.key))
			if err != nil {
				return err
			}
			*b.dst = x
		}
	}
	return nil
}

// maxLimitsPerDescriptor bounds rate_limit plus rate_limits, so that a
// request of a few descriptors fits one TakeAll (backend.MaxRequests).
const maxLimitsPerDescriptor = 4

// limits reads a descriptor's rate_limit and rate_limits.
func (p *parser) limits(d *Descriptor, fs fields, n *configtree.Node, path string) error {
	if v := fs["rate_limit"]; v != nil && !isNull(v) {
		l, unlimited, err := p.limit(v, configtree.Join(path, "rate_limit"), true)
		if err != nil {
			return err
		}
		if unlimited {
			d.Unlimited = true
		} else {
			d.Limits = append(d.Limits, l)
		}
	}
	if v := fs["rate_limits"]; v != nil && !isNull(v) {
		at := configtree.Join(path, "rate_limits")
		if v.Kind != configtree.SeqNode {
			return p.errorf(v, at, "expected a list of limits (- unit: ...), found %s", configtree.Describe(v))
		}
		if d.Unlimited && len(v.Items) > 0 {
			return p.errorf(v, at, "the descriptor is unlimited; remove rate_limits or unlimited")
		}
		for i, item := range v.Items {
			l, _, err := p.limit(item, fmt.Sprintf("%s[%d]", at, i), false)
			if err != nil {
				return err
			}
			d.Limits = append(d.Limits, l)
		}
	}
	if len(d.Limits) > maxLimitsPerDescriptor {
		return p.errorf(n, path, "%d limits on one descriptor; at most %d", len(d.Limits), maxLimitsPerDescriptor)
	}
	return nil
}

// limit reads a rate_limit (single) or an entry of rate_limits. It
// reports unlimited: true instead of a limit.
func (p *parser) limit(n *configtree.Node, path string, single bool) (Limit, bool, error) {
	fs, err := p.mapping(n, path, limitKeys)
	if err != nil {
		return Limit{}, false, err
	}
	unlimited, err := p.unlimited(fs, path, single)
	if err != nil {
		return Limit{}, false, err
	}
	unit, err := p.unit(fs, path, unlimited)
	if err != nil {
		return Limit{}, false, err
	}
	if unlimited {
		if unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
			return Limit{}, false, p.errorf(fs["unit"], configtree.Join(path, "unit"), "should not specify rate limit unit when unlimited; remove the unit or unlimited")
		}
		return Limit{}, true, nil
	}
	if unit == rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		return Limit{}, false, p.errorf(n, configtree.Join(path, "unit"), "invalid rate limit unit ''; write unit: second, minute, hour, day, week, month or year")
	}
	l := Limit{Line: n.Line, Unit: unit, Algorithm: algorithms.FixedWindow}
	// In this order: the first problem found is the one reported.
	for _, read := range []func(*Limit, *configtree.Node, fields, string) error{p.rate, p.algorithm, p.onFailure, p.names} {
		if err := read(&l, n, fs, path); err != nil {
			return Limit{}, false, err
		}
	}
	return l, false, nil
}

// unlimited reads a limit's unlimited, which only rate_limit may set.
func (p *parser) unlimited(fs fields, path string, single bool) (bool, error) {
	v := fs["unlimited"]
	if v == nil {
		return false, nil
	}
	unlimited, err := p.boolean(v, configtree.Join(path, "unlimited"))
	if err == nil && unlimited && !single {
		err = p.errorf(v, configtree.Join(path, "unlimited"), "unlimited in rate_limits; write rate_limit: {unlimited: true} alone")
	}
	return unlimited, err
}

// unit reads a limit's unit: UNKNOWN when it has none, or, when the limit
// is unlimited, one the reference does not know.
func (p *parser) unit(fs fields, path string, unlimited bool) (rlsv3.RateLimitResponse_RateLimit_Unit, error) {
	v := fs["unit"]
	if v == nil {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, nil
	}
	text, err := p.str(v, configtree.Join(path, "unit"))
	if err != nil {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, err
	}
	value, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(text)]
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(value)
	if ok && unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		return unit, nil
	}
	if unlimited {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, nil
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, p.errorf(v, configtree.Join(path, "unit"),
		"invalid rate limit unit '%s'; write second, minute, hour, day, week, month or year", configtree.Shorten(text))
}

// rate reads requests_per_unit and unit_multiplier.
func (p *parser) rate(l *Limit, _ *configtree.Node, fs fields, path string) error {
	if v := fs["requests_per_unit"]; v != nil {
		x, err := p.uint32(v, configtree.Join(path, "requests_per_unit"))
		if err != nil {
			return err
		}
		l.RequestsPerUnit = x
	}
	v := fs["unit_multiplier"]
	if v == nil {
		return nil
	}
	at := configtree.Join(path, "unit_multiplier")
	x, err := p.uint32(v, at)
	if err != nil {
		return err
	}
	if x == 0 {
		return p.errorf(v, at, "unit_multiplier is 0; write 1 or more (the window is unit x multiplier)")
	}
	// Compared by division: unit x multiplier can pass what a Duration holds.
	if time.Duration(x) > algorithms.MaxWindow/unitLength(l.Unit) {
		return p.errorf(v, at, "the window %s x %d is longer than %d days, the longest window; use a smaller multiplier",
			strings.ToLower(l.Unit.String()), x, algorithms.MaxWindow/(24*time.Hour))
	}
	l.UnitMultiplier = x
	return nil
}

// algorithm reads the algorithm, a rate one, and checks the limit fits it.
func (p *parser) algorithm(l *Limit, n *configtree.Node, fs fields, path string) error {
	if v := fs["algorithm"]; v != nil {
		name, err := p.str(v, configtree.Join(path, "algorithm"))
		if err != nil {
			return err
		}
		a := algorithms.Lookup(algorithms.Name(name))
		if a == nil || a.HoldsLeases() {
			why := "unknown algorithm"
			if a != nil {
				why = "concurrency holds leases, which a rate limit service cannot release"
			}
			return p.errorf(v, configtree.Join(path, "algorithm"), "%s '%s'; write one of %s", why, configtree.Shorten(name), strings.Join(rateAlgorithms(), ", "))
		}
		l.Algorithm = a.Name
	}
	if l.RequestsPerUnit > 0 {
		rule := algorithms.Rule{Algorithm: l.Algorithm, Limit: int64(l.RequestsPerUnit), Window: l.Window()}
		if err := rule.Validate(); err != nil {
			return p.errorf(n, path, "%v", strings.TrimPrefix(err.Error(), algorithms.ErrInvalidRule.Error()+": "))
		}
	}
	return nil
}

// rateAlgorithms names the algorithms a limit may use: all but those
// holding leases.
func rateAlgorithms() []string {
	var rate []string
	for _, a := range algorithms.Algorithms() {
		if !a.HoldsLeases() {
			rate = append(rate, string(a.Name))
		}
	}
	return rate
}

// onFailure reads on_failure, limitkit's policy while the store fails.
func (p *parser) onFailure(l *Limit, _ *configtree.Node, fs fields, path string) error {
	v := fs["on_failure"]
	if v == nil {
		return nil
	}
	s, err := p.str(v, configtree.Join(path, "on_failure"))
	if err != nil {
		return err
	}
	if l.OnFailure, err = backend.ParseFailurePolicy(s); err != nil {
		return p.errorf(v, configtree.Join(path, "on_failure"), "%v", err)
	}
	return nil
}

// names reads the limit's name and the names it replaces.
func (p *parser) names(l *Limit, _ *configtree.Node, fs fields, path string) error {
	var err error
	if l.Name, err = p.str(fs["name"], configtree.Join(path, "name")); err != nil {
		return err
	}
	v := fs["replaces"]
	if v == nil || isNull(v) {
		return nil
	}
	at := configtree.Join(path, "replaces")
	if v.Kind != configtree.SeqNode {
		return p.errorf(v, at, "expected a list of - name: NAME, found %s", configtree.Describe(v))
	}
	for i, item := range v.Items {
		ia := fmt.Sprintf("%s[%d]", at, i)
		f, err := p.mapping(item, ia, replacesKeys)
		if err != nil {
			return err
		}
		name, err := p.str(f["name"], configtree.Join(ia, "name"))
		if err != nil {
			return err
		}
		if name == "" {
			return p.errorf(item, ia, "should not have an empty replaces entry; write - name: NAME")
		}
		if name == l.Name {
			return p.errorf(item, ia, "replaces should not contain name of same descriptor '%s'", configtree.Shorten(name))
		}
		l.Replaces = append(l.Replaces, name)
	}
	return nil
}

// str reads a scalar as text, as the reference does (value: 1 is "1"); an
// absent or null value is "".
func (p *parser) str(n *configtree.Node, path string) (string, error) {
	if n == nil || isNull(n) {
		return "", nil
	}
	if n.Kind != configtree.ScalarNode {
		return "", p.errorf(n, path, "expected a string, found %s", configtree.Describe(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *configtree.Node, path string) (bool, error) {
	if n.Kind == configtree.ScalarNode && n.Tag == configtree.BoolTag {
		return n.Value == "true", nil
	}
	return false, p.errorf(n, path, "expected true or false, found %s", configtree.Describe(n))
}

func (p *parser) uint32(n *configtree.Node, path string) (uint32, error) {
	if n.Kind == configtree.ScalarNode && n.Tag == configtree.IntTag {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil && v >= 0 && v <= math.MaxUint32 {
			return uint32(v), nil
		}
	}
	return 0, p.errorf(n, path, "expected a whole number from 0 to %d, found %s", uint32(math.MaxUint32), configtree.Describe(n))
}

func isNull(n *configtree.Node) bool {
	return n.Kind == configtree.ScalarNode && n.Tag == configtree.NullTag
}

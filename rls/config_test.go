package rls

import (
	"errors"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("a.yaml", []byte(`
domain: d
descriptors:
  - key: k
    value: v
    shadow_mode: true
    detailed_metric: true
    quota_mode: false
    metadata: {anything: [1, 2]}
    rate_limit:
      unit: Second
      requests_per_unit: 3
      unit_multiplier: 5
      algorithm: gcra
      on_failure: local:3
      name: n
      replaces: [{name: m}]
    rate_limits:
      - {unit: day, requests_per_unit: 100, algorithm: two_level}
    descriptors:
      - key: inner
        rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Descriptors[0]
	if c.Domain != "d" || d.Key != "k" || d.Value != "v" || !d.ShadowMode || !d.DetailedMetric || d.Line != 4 || len(d.Limits) != 2 {
		t.Fatalf("parsed %+v %+v", c, d)
	}
	l := d.Limits[0]
	if l.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND || l.RequestsPerUnit != 3 || l.Window() != 5*time.Second ||
		l.Algorithm != algorithms.GCRA || l.OnFailure != backend.LocalPolicy(3) || l.Name != "n" || len(l.Replaces) != 1 || l.Line != 11 {
		t.Errorf("limit %+v", l)
	}
	if l := d.Limits[1]; l.Algorithm != algorithms.TwoLevel || l.Window() != 24*time.Hour || l.OnFailure.Mode() != backend.ModeUnset {
		t.Errorf("second limit %+v", l)
	}
	if !d.Descriptors[0].Unlimited {
		t.Errorf("inner is not unlimited")
	}
	if l := (Limit{Unit: rlsv3.RateLimitResponse_RateLimit_MONTH}); l.Window() != 30*24*time.Hour {
		t.Errorf("a month is %v; the reference's is 30 days", l.Window())
	}
}

// Each refusal names the file, the line, and what to change.
func TestConfigRefusals(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n",
			"config.yaml:4: descriptors[0]: config error, unknown key 'rate_limt' (did you mean \"rate_limit\"?); write one of key, value"},
		{"unknown key in a limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      request_per_unit: 3\n",
			"config.yaml:6: descriptors[0].rate_limit: config error, unknown key 'request_per_unit'"},
		{"duplicate key at one level", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			"config.yaml:5: descriptors[1]: duplicate descriptor composite key 'k_v' (also at descriptors[0])"},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"config.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n",
			"config.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes'; write second, minute"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
			"config.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit ''"},
		{"empty domain", "descriptors: []\n", "config.yaml:1: domain: the domain is empty; write domain: NAME"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "config.yaml:3: descriptors[0].key: descriptor has empty key"},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n",
			"config.yaml:4: descriptors[0].rate_limit.algorithm: unknown algorithm 'leaky'; write one of sliding_log,"},
		{"concurrency", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency}\n",
			"config.yaml:4: descriptors[0].rate_limit.algorithm: concurrency holds leases"},
		{"bad policy", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, on_failure: open}\n",
			"config.yaml:4: descriptors[0].rate_limit.on_failure: failure policy \"open\": write \"local\""},
		{"window too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 2}\n",
			"config.yaml:4: descriptors[0].rate_limit.unit_multiplier: the window year x 2 is longer than"},
		{"zero multiplier", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 0}\n",
			"config.yaml:4: descriptors[0].rate_limit.unit_multiplier: unit_multiplier is 0; write 1 or more"},
		{"log limit too large", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 20000, algorithm: sliding_log}\n",
			"config.yaml:4: descriptors[0].rate_limit: limit 20000"},
		{"negative limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"config.yaml:4: descriptors[0].rate_limit.requests_per_unit: expected a whole number from 0 to 4294967295, found \"-1\""},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      replaces:\n        - name: \"\"\n",
			"config.yaml:7: descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      name: a\n      replaces:\n        - name: a\n",
			"config.yaml:8: descriptors[0].rate_limit.replaces[0]: replaces should not contain name of same descriptor 'a'"},
		{"same algorithm and window twice", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: second, requests_per_unit: 2}\n",
			"config.yaml:6: two fixed_window limits of one window on one descriptor (the other at line 4)"},
		{"unlimited in rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unlimited: true}\n",
			"config.yaml:5: descriptors[0].rate_limits[0].unlimited: unlimited in rate_limits"},
		{"list of scalars", "domain: d\ndescriptors:\n  - k\n", "config.yaml:3: descriptors[0]: expected a mapping of key, value"},
		{"non-string key", "domain: d\n1: x\n", "config.yaml:2: config error, key is not of type string: 1"},
		{"key twice", "domain: d\ndomain: e\n", "config.yaml:2: domain: written twice at one level (also on line 1); keep one"},
		{"two documents", "domain: d\n---\ndomain: e\n", "config.yaml:3: a second YAML document"},
		{"bad yaml", "domain: [d\n", "config.yaml:2: not valid YAML"},
		{"empty", "", "config.yaml: the file is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRules(File{Name: "config.yaml", Data: []byte(c.yaml)})
			if err == nil {
				t.Fatalf("accepted; want %q", c.want)
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error\n  %v\nwant it to start with\n  %s", err, c.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
				t.Errorf("error %T is not a *ConfigError wrapping ErrConfig", err)
			}
		})
	}
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	_, err := NewRules(File{Name: "a.yaml", Data: []byte("domain: d\n")}, File{Name: "b.yaml", Data: []byte("domain: d\n")})
	if err == nil || !strings.HasPrefix(err.Error(), "b.yaml: domain: duplicate domain 'd' in config file (also in a.yaml)") {
		t.Fatalf("duplicate domain: %v", err)
	}
	r, err := NewRules(File{Name: "a.yaml", Data: []byte("domain: d\n")}, File{Name: "b.yaml", Data: []byte("domain: e\n")})
	if err != nil || strings.Join(r.Domains(), ",") != "d,e" {
		t.Fatalf("two domains: %v %v", r.Domains(), err)
	}
}

// A huge value in an error is cut.
func TestConfigErrorsBoundEchoedText(t *testing.T) {
	_, err := NewRules(File{Name: "c.yaml", Data: []byte("domain: d\n" + strings.Repeat("x", 5000) + ": 1\n")})
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("error of %d bytes: %.200v", len(err.Error()), err)
	}
}

package rls

import (
	"errors"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// The reference's config tests (envoyproxy/ratelimit test/config/
// config_test.go and its YAML files), restated against the service: each
// GetLimit of the reference is one call here, its limit read from the
// status's current_limit and its stats key from the Stat reported.

const refBasicConfig = `
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: key2
    value: value3
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
`

// refLimit is what one GetLimit of the reference answers: the limit (nil
// for none) and its stats key.
type refLimit struct {
	limit *rlsv3.RateLimitResponse_RateLimit
	stat  string
}

// get sends d alone to domain and returns the limit that applied and the
// stats key it was counted under.
func (h *harness) get(domain string, d *ratelimitv3.RateLimitDescriptor) refLimit {
	h.t.Helper()
	h.takeStats()
	st := h.call(request(domain, 0, d)).GetStatuses()[0]
	r := refLimit{limit: st.GetCurrentLimit()}
	if s := h.takeStats(); len(s) > 0 {
		r.stat = s[0].Key
	}
	return r
}

// expectLimit checks a refLimit: rps 0 means no limit.
func expectLimit(t *testing.T, what string, got refLimit, rps uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, stat string) {
	t.Helper()
	if rps == 0 {
		if got.limit != nil {
			t.Errorf("%s: limit %v; want none", what, got.limit)
		}
		return
	}
	if got.limit.GetRequestsPerUnit() != rps || got.limit.GetUnit() != unit {
		t.Errorf("%s: limit %v; want %d per %v", what, got.limit, rps, unit)
	}
	if stat != "" && got.stat != stat {
		t.Errorf("%s: stats key %q; want %q", what, got.stat, stat)
	}
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

func TestRef_ConfigImpl_BasicConfig(t *testing.T) {
	h := newHarness(t, memStore(t), refBasicConfig)
	expectLimit(t, "unknown domain", h.get("foo_domain", desc()), 0, 0, "")
	expectLimit(t, "empty descriptor", h.get("test-domain", desc()), 0, 0, "")
	expectLimit(t, "key1=something", h.get("test-domain", desc("key1", "something")), 0, 0, "")
	expectLimit(t, "key1=value1 has no limit of its own", h.get("test-domain", desc("key1", "value1")), 0, 0, "")
	expectLimit(t, "key2=value2 has no children", h.get("test-domain", desc("key2", "value2", "subkey", "subvalue")), 0, 0, "")
	expectLimit(t, "key5 subkey5 other value", h.get("test-domain", desc("key5", "value5", "subkey5", "subvalue")), 0, 0, "")
	expectLimit(t, "subkey1 by key", h.get("test-domain", desc("key1", "value1", "subkey1", "something")), 5, second, "test-domain.key1_value1.subkey1")
	expectLimit(t, "subkey1 by value", h.get("test-domain", desc("key1", "value1", "subkey1", "subvalue1")), 10, second, "test-domain.key1_value1.subkey1_subvalue1")
	expectLimit(t, "key2 by key", h.get("test-domain", desc("key2", "something")), 20, minute, "test-domain.key2")
	expectLimit(t, "key2 by value", h.get("test-domain", desc("key2", "value2")), 30, minute, "test-domain.key2_value2")
	expectLimit(t, "key2=value3 whitelisted", h.get("test-domain", desc("key2", "value3")), 0, 0, "")
	key3 := h.get("test-domain", desc("key3", "foo"))
	expectLimit(t, "key3", key3, 1, hour, "test-domain.key3")
	if key3.limit.GetName() != "" {
		t.Errorf("key3 has no name in the config; got %q", key3.limit.GetName())
	}
	key4 := h.get("test-domain", desc("key4", "foo"))
	expectLimit(t, "key4", key4, 1, day, "test-domain.key4")
	if key4.limit.GetName() != "key4_rate_limit" {
		t.Errorf("key4 name %q; want key4_rate_limit", key4.limit.GetName())
	}
	if st := h.call(request("test-domain", 0, desc("key6", "foo"))).GetStatuses()[0]; st.GetLimitRemaining() != 1<<32-1 || st.GetCode() != ok {
		t.Errorf("key6 unlimited: %v", st)
	}
	expectLimit(t, "key7 detailed", h.get("test-domain", desc("key7", "unspecified_value")), 70, minute, "test-domain.key7_unspecified_value")
	expectLimit(t, "key7 detailed, another value", h.get("test-domain", desc("key7", "another_value")), 70, minute, "test-domain.key7_another_value")
}

// TestRef_ConfigImpl_DomainMerge: NewMergedRules merges the files of one
// domain as the reference does under MERGE_DOMAIN_CONFIG=true; NewRules
// refuses them, as the reference does by default.
func TestRef_ConfigImpl_DomainMerge(t *testing.T) {
	key1 := File{Name: "merge_domain_key1.yaml", Data: []byte("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")}
	key2 := File{Name: "merge_domain_key2.yaml", Data: []byte("domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n")}
	if _, err := NewRules(key1, key2); err == nil || !strings.Contains(err.Error(), "duplicate domain 'test-domain'") || !strings.Contains(err.Error(), "merge_domain_key1.yaml") {
		t.Fatalf("two files of one domain, not merged: %v; want the reference's duplicate domain error naming both files", err)
	}
	rules, err := NewMergedRules(key1, key2)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(memStore(t), rules, WithStats(func(Stat) {}))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, svc: svc}
	expectLimit(t, "foo_domain", h.get("foo_domain", desc()), 0, 0, "")
	expectLimit(t, "empty descriptor", h.get("test-domain", desc()), 0, 0, "")
	expectLimit(t, "key1 from the first file", h.get("test-domain", desc("key1", "value1")), 10, minute, "")
	expectLimit(t, "key2 from the second file", h.get("test-domain", desc("key2", "value2")), 20, minute, "")
}

// TestRef_ConfigImpl_DuplicateKeyDomainMerge: merging one file twice
// refuses its descriptors' second definition.
func TestRef_ConfigImpl_DuplicateKeyDomainMerge(t *testing.T) {
	key1 := File{Name: "merge_domain_key1.yaml", Data: []byte("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")}
	if _, err := NewMergedRules(key1, key1); err == nil || !strings.Contains(err.Error(), "merge_domain_key1.yaml") ||
		!strings.Contains(err.Error(), "duplicate descriptor composite key 'test-domain.key1_value1'") {
		t.Fatalf("one file merged twice: %v", err)
	}
}

func TestRef_ConfigImpl_ConfigLimitOverride(t *testing.T) {
	h := newHarness(t, memStore(t), refBasicConfig)
	override := func(d *ratelimitv3.RateLimitDescriptor, rps uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rps, Unit: typeUnit(unit)}
		return d
	}
	// No matching domain: no limit, the override included.
	expectLimit(t, "override, unknown domain", h.get("foo_domain", override(desc("key1", "value1"), 10, day)), 0, 0, "")
	got := h.get("test-domain", override(desc("key1", "value1", "subkey1", "something"), 10, day))
	expectLimit(t, "override", got, 10, day, "test-domain.key1_value1.subkey1_something")
	if got.limit.GetName() != "" || got.limit.GetUnitMultiplier() != nil {
		t.Errorf("override current_limit %v; want only 10 per day", got.limit)
	}
	// A change of the override's value keeps its stats key.
	expectLimit(t, "override changed", h.get("test-domain", override(desc("key1", "value1", "subkey1", "something"), 42, hour)), 42, hour, "test-domain.key1_value1.subkey1_something")
	// Another value is another key.
	expectLimit(t, "override, other value", h.get("test-domain", override(desc("key1", "value1", "subkey1", "something_else"), 42, hour)), 42, hour, "test-domain.key1_value1.subkey1_something_else")
}

// refConfigError is one of the reference's refused files and the text of
// its error.
type refConfigError struct {
	test, file, yaml, want string
}

func TestRef_ConfigImpl_RefusedFiles(t *testing.T) {
	cases := []refConfigError{
		{"TestEmptyDomain", "empty_domain.yaml", "descriptors:\n", "domain"},
		{"TestEmptyKey", "empty_key.yaml", "domain: test-domain\ndescriptors:\n  - value: value1\n", "empty key"},
		{"TestDuplicateKey", "duplicate_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n", "duplicate descriptor composite key 'key1_value1'"},
		{"TestBadLimitUnit", "bad_limit_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n", "invalid rate limit unit 'foo'"},
		{"TestReplacesSelf", "replaces_self.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name: self\n          unit: second\n          requests_per_unit: 5\n", "replaces should not contain name of same descriptor"},
		{"TestReplacesEmpty", "replaces_empty.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n", "should not have an empty replaces entry"},
		{"TestBadYaml", "bad_yaml.yaml", "'''\n", "not valid YAML"},
		{"TestMisspelledKey", "misspelled_key.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n", "config error, unknown key 'ratelimit'"},
		{"TestMisspelledKey2", "misspelled_key2.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", "config error, unknown key 'requestsperunit'"},
		{"TestNonStringKey", "non_string_key.yaml", "0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n", "config error, key is not of type string: 0.25"},
		{"TestNonMapList", "non_map_list.yaml", "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n", "expected a mapping"},
		{"TestUnlimitedWithRateLimitUnit", "unlimited_with_unit.yaml", "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n", "should not specify rate limit unit when unlimited"},
		{"share_threshold without a wildcard", "share.yaml", "domain: d\ndescriptors:\n  - key: files\n    value: plain\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", "share_threshold can only be used with wildcard values (containing '*'), but found key 'files_plain'"},
	}
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			_, err := NewRules(File{Name: c.file, Data: []byte(c.yaml)})
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.file) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v; want a refusal naming %s and saying %q", err, c.file, c.want)
			}
		})
	}
	// TestDuplicateDomain.
	_, err := NewRules(File{Name: "basic_config.yaml", Data: []byte(refBasicConfig)}, File{Name: "duplicate_domain.yaml", Data: []byte("domain: test-domain\ndescriptors:\n")})
	if err == nil || !strings.Contains(err.Error(), "duplicate_domain.yaml") || !strings.Contains(err.Error(), "duplicate domain 'test-domain'") {
		t.Errorf("TestDuplicateDomain: %v", err)
	}
}

func TestRef_ConfigImpl_ShadowModeConfig(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
        shadow_mode: true
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    shadow_mode: true
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
`)
	shadowOf := func(entries ...string) (uint32, bool) {
		h.takeStats()
		h.call(request("test-domain", 0, desc(entries...)))
		s := h.takeStats()
		if len(s) != 1 {
			t.Fatalf("%v: %d stats", entries, len(s))
		}
		g := h.svc.Rules().lookup("test-domain", desc(entries...)).node
		return uint32(g.limits[0].alg.Limit), g.limits[0].shadow
	}
	for _, c := range []struct {
		entries []string
		limit   uint32
		shadow  bool
	}{
		{[]string{"key1", "value1", "subkey1", "something"}, 5, false},
		{[]string{"key1", "value1", "subkey1", "subvalue1"}, 10, true},
		{[]string{"key2", "something"}, 20, true},
		{[]string{"key2", "value2"}, 30, false},
	} {
		if l, s := shadowOf(c.entries...); l != c.limit || s != c.shadow {
			t.Errorf("%v: limit %d shadow %v; want %d %v", c.entries, l, s, c.limit, c.shadow)
		}
	}
	// A shadow rule over its limit answers OK and counts shadow_mode.
	for range 20 {
		h.call(request("test-domain", 0, desc("key2", "x")))
	}
	h.takeStats()
	resp := h.call(request("test-domain", 0, desc("key2", "x")))
	s := h.takeStats()
	if resp.GetOverallCode() != ok || len(s) != 1 || s[0].ShadowMode != 1 || s[0].OverLimit != 1 || s[0].Key != "test-domain.key2" {
		t.Errorf("shadow over its limit: %v %+v", resp, s)
	}
}

const refWildcardConfig = `
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noWild
    value: foo
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noVal
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 20}
`

func TestRef_ConfigImpl_WildcardConfig(t *testing.T) {
	h := newHarness(t, memStore(t), refWildcardConfig)
	cases := []struct {
		entries []string
		rps     uint32
		stat    string
	}{
		{[]string{"noVal", "foo1"}, 20, "test-domain.noVal"},
		{[]string{"noVal", "foo2"}, 20, "test-domain.noVal"},
		{[]string{"wild", "foo1"}, 20, "test-domain.wild_foo*"},
		{[]string{"wild", "foo2"}, 20, "test-domain.wild_foo*"},
		{[]string{"nestedWild", "val1", "wild", "goo2"}, 20, "test-domain.nestedWild_val1.wild_goo*"},
		{[]string{"wild", "bar"}, 0, ""},
		{[]string{"noWild", "foo1"}, 0, ""},
		{[]string{"midWild", "barab"}, 20, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "bar123b"}, 20, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "barb"}, 20, "test-domain.midWild_bar*b"},
		{[]string{"midWild", "bara"}, 0, ""},
		{[]string{"midWild", "xbarb"}, 0, ""},
		{[]string{"multiWild", "foo123bar456baz"}, 10, "test-domain.multiWild_foo*bar*baz"},
		{[]string{"multiWild", "foobarbaz"}, 10, "test-domain.multiWild_foo*bar*baz"},
		{[]string{"multiWild", "foo123baz"}, 0, ""},
		{[]string{"multiWild", "bar456baz"}, 0, ""},
	}
	for _, c := range cases {
		expectLimit(t, strings.Join(c.entries, "="), h.get("test-domain", desc(c.entries...)), c.rps, minute, c.stat)
	}
}

func TestRef_ConfigImpl_DetailedMetric(t *testing.T) {
	nested := func(detailed1, detailed2 bool) string {
		return `
domain: nested
descriptors:
  - key: key-1
    detailed_metric: ` + boolText(detailed1) + `
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        detailed_metric: ` + boolText(detailed2) + `
        rate_limit: {unit: minute, requests_per_unit: 5}
`
	}
	realistic := `
domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
`
	cases := []struct {
		name, yaml string
		entries    []string
		stat       string
	}{
		{"nested with no values but request only top-level key", nested(true, false), []string{"key-1", "value-1"}, "nested.key-1_value-1"},
		{"nested with no values but request only top-level key with no detailed metric", nested(false, false), []string{"key-1", "value-1"}, "nested.key-1"},
		{"nested with no values and request fully nested descriptors", nested(true, true), []string{"key-1", "value-1", "key-2", "value-2"}, "nested.key-1_value-1.key-2_value-2"},
		{"nested with no values and request fully nested descriptors with no detailed metric", nested(false, false), []string{"key-1", "value-1", "key-2", "value-2"}, "nested.key-1.key-2"},
		{"test nested descriptors with simple request", realistic, []string{"key_1", "value-for-key-1"}, "nested.key_1_value-for-key-1"},
		{"test nested only second descriptor request not nested", realistic, []string{"key_2", "key-2-value"}, "nested.key_2_key-2-value"},
		{"test nested descriptors with nested request", realistic, []string{"key_2", "key-2-value", "key_3", "requested-key3-value"}, "nested.key_2_key-2-value.key_3_requested-key3-value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, memStore(t), c.yaml)
			if got := h.get("nested", desc(c.entries...)); got.limit == nil || got.stat != c.stat {
				t.Errorf("%+v; want stats key %q", got, c.stat)
			}
		})
	}
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// valueToMetricYAML is the reference's route/http_method/subject_id tree,
// value_to_metric on the first two levels, detailed_metric on the leaf
// when asked.
func valueToMetricYAML(domain string, detailedLeaf bool) string {
	return `
domain: ` + domain + `
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: ` + boolText(detailedLeaf) + `
            rate_limit: {unit: minute, requests_per_unit: 60}
`
}

func TestRef_ConfigImpl_ValueToMetric(t *testing.T) {
	cases := []struct {
		test, yaml, domain string
		entries            []string
		stat               string
	}{
		{"UsesRuntimeValuesInStats", valueToMetricYAML("domain", false), "domain",
			[]string{"route", "draw", "http_method", "GET", "subject_id", "123"}, "domain.route_draw.http_method_GET.subject_id"},
		{"DefaultKeyIncludesValueAtThatLevel", `
domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
`, "d", []string{"k1", "A", "k2", "foo"}, "d.k1_A.k2"},
		{"MidLevelOnly", `
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
`, "d", []string{"k1", "X", "k2", "Y", "k3", "Z"}, "d.k1.k2_Y.k3"},
		{"NoFlag_Unchanged", `
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
`, "d", []string{"k1", "X", "k2", "Y"}, "d.k1.k2"},
		{"DoesNotOverrideDetailedMetric", valueToMetricYAML("domain", true), "domain",
			[]string{"route", "draw", "http_method", "GET", "subject_id", "123"}, "domain.route_draw.http_method_GET.subject_id_123"},
		{"WithEmptyValue route", valueToMetricYAML("domain", false), "domain",
			[]string{"route", "", "http_method", "GET", "subject_id", "123"}, "domain.route.http_method_GET.subject_id"},
		{"WithEmptyValue http_method", valueToMetricYAML("domain", false), "domain",
			[]string{"route", "draw", "http_method", "", "subject_id", "123"}, "domain.route_draw.http_method.subject_id"},
		{"WithEmptyValue both", valueToMetricYAML("domain", false), "domain",
			[]string{"route", "", "http_method", "", "subject_id", "123"}, "domain.route.http_method.subject_id"},
		{"FullKeyMatchesStatsKey", valueToMetricYAML("test-domain", false), "test-domain",
			[]string{"route", "api", "http_method", "GET", "subject_id", "user123"}, "test-domain.route_api.http_method_GET.subject_id"},
		{"FullKeyMatchesStatsKey without value_to_metric", `
domain: test-domain-2
descriptors:
  - key: route
    descriptors:
      - key: http_method
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
`, "test-domain-2", []string{"route", "api", "http_method", "GET", "subject_id", "user123"}, "test-domain-2.route.http_method.subject_id"},
		{"FullKeyMatchesStatsKey with detailed_metric", `
domain: test-domain-3
descriptors:
  - key: route
    descriptors:
      - key: http_method
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
`, "test-domain-3", []string{"route", "api", "http_method", "GET", "subject_id", "user123"}, "test-domain-3.route_api.http_method_GET.subject_id_user123"},
	}
	for _, c := range cases {
		t.Run("TestValueToMetric_"+c.test, func(t *testing.T) {
			h := newHarness(t, memStore(t), c.yaml)
			if got := h.get(c.domain, desc(c.entries...)); got.limit == nil || got.stat != c.stat {
				t.Errorf("%+v; want stats key %q", got, c.stat)
			}
		})
	}
}

func TestRef_ConfigImpl_ValueToMetric_WithConfiguredValues(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 30}
`)
	expectLimit(t, "GET", h.get("test-domain", desc("route", "api", "http_method", "GET", "subject_id", "user123")), 60, minute, "test-domain.route_api.http_method_GET.subject_id")
	expectLimit(t, "POST", h.get("test-domain", desc("route", "api", "http_method", "POST", "subject_id", "user456")), 30, minute, "test-domain.route_api.http_method_POST.subject_id")
}

func TestRef_ConfigImpl_ValueToMetric_WithWildcard(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: domain
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
`)
	expectLimit(t, "alice", h.get("domain", desc("user", "alice", "action", "readfile", "resource", "documents")), 100, minute, "domain.user_alice.action_readfile.resource")
	expectLimit(t, "bob", h.get("domain", desc("user", "bob", "action", "readdata", "resource", "database")), 100, minute, "domain.user_bob.action_readdata.resource")
}

const refShareThresholdConfig = `
domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 200}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 300}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 120}
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit: {unit: minute, requests_per_unit: 150}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 80}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`

// TestRef_ConfigImpl_ShareThreshold restates the reference's cases: the
// stats key of each, and (what its base limiter test checks through the
// cache key) that every matching value counts on one counter.
func TestRef_ConfigImpl_ShareThreshold(t *testing.T) {
	h := newHarness(t, memStore(t), refShareThresholdConfig)
	cases := []struct {
		name    string
		entries [][]string // values that must share one counter
		rps     uint32
		stat    string
	}{
		{"Basic share_threshold", [][]string{{"files", "files/a.pdf"}, {"files", "files/b.csv"}, {"files", "files/c.txt"}}, 100, "test-domain.files_files/*"},
		{"share_threshold priority over value_to_metric", [][]string{{"route", "api/v1", "method", "GET"}, {"route", "api/v2", "method", "GET"}}, 60, "test-domain.route_api/*.method"},
		{"share_threshold priority over detailed_metric", [][]string{{"service", "svc/user", "endpoint", "get"}, {"service", "svc/order", "endpoint", "get"}}, 80, "test-domain.service_svc/*.endpoint_get"},
		{"Nested share_threshold", [][]string{{"nested", "parent", "files", "nested/file1.txt"}, {"nested", "parent", "files", "nested/file2.txt"}}, 200, "test-domain.nested_parent.files_nested/*"},
		{"Multiple wildcards", [][]string{{"files", "top/file1.txt", "files", "nested/file1.txt"}, {"files", "top/file2.pdf", "files", "nested/sub2.csv"}}, 300, "test-domain.files_top/*.files_nested/*"},
		{"Both parent and child share", [][]string{{"user", "user/alice", "resource", "res/file1", "action", "read"}, {"user", "user/bob", "resource", "res/file2", "action", "read"}}, 150, "test-domain.user_user/*.resource_res/*.action"},
		{"Wildcard matches share", [][]string{{"file", "test2"}, {"file", "test23"}, {"file", "test123"}}, 100, "test-domain.file_test*"},
		{"middle wildcard", [][]string{{"midpath", "/api/v1"}, {"midpath", "/api-beta-v1"}, {"midpath", "/apiXYZv1"}}, 100, "test-domain.midpath_/api*v1"},
		{"multi-wildcard", [][]string{{"multiroute", "svcAepBrpc"}, {"multiroute", "svcXXXepYYYrpc"}, {"multiroute", "svceprpc"}}, 50, "test-domain.multiroute_svc*ep*rpc"},
		{"middle wildcard over value_to_metric", [][]string{{"midroute", "/api/v2"}, {"midroute", "/api-beta-v2"}}, 80, "test-domain.midroute_/api*v2"},
		{"nested middle wildcards", [][]string{{"tenant", "t1prod", "resource", "resAv2"}, {"tenant", "t99prod", "resource", "resBBBv2"}}, 60, "test-domain.tenant_t*prod.resource_res*v2"},
	}
	for _, c := range cases {
		for i, e := range c.entries {
			got := h.get("test-domain", desc(e...))
			expectLimit(t, c.name, got, c.rps, minute, c.stat)
			// One counter: the i-th value finds i units taken by the others.
			if st := h.call(request("test-domain", 0, withHits(desc(e...), 0))).GetStatuses()[0]; st.GetLimitRemaining() != c.rps-uint32(i+1) {
				t.Errorf("%s: value %d of %v finds %d left; want %d (one counter for every match)", c.name, i, e, st.GetLimitRemaining(), c.rps-uint32(i+1))
			}
		}
	}
	// A parent shared and a child wildcard not: the child's values count
	// apart, and the stats key keeps the child's wildcard.
	expectLimit(t, "mixed", h.get("test-domain", desc("path", "path/foo", "file", "file/doc1", "type", "pdf")), 120, minute, "test-domain.path_path/*.file_file/*.type")
	if st := h.call(request("test-domain", 0, withHits(desc("path", "path/bar", "file", "file/doc2", "type", "pdf"), 0))).GetStatuses()[0]; st.GetLimitRemaining() != 120 {
		t.Errorf("mixed: another child value finds %d left; want 120 (the child is not shared)", st.GetLimitRemaining())
	}
	// Explicit value precedence: file=test1 has its own limit and key.
	expectLimit(t, "explicit", h.get("test-domain", desc("file", "test1")), 50, minute, "test-domain.file_test1")
	expectLimit(t, "no match", h.get("test-domain", desc("midpath", "/api/v2")), 0, 0, "")
	expectLimit(t, "no match", h.get("test-domain", desc("multiroute", "svcABCrpc")), 0, 0, "")
}

func TestRef_ConfigImpl_WildcardStatsBehavior(t *testing.T) {
	one := func(flags string, value string) string {
		return "domain: test-domain\ndescriptors:\n  - key: wild\n    value: \"" + value + "\"\n" + flags + "    rate_limit: {unit: minute, requests_per_unit: 20}\n"
	}
	cases := []struct {
		name, yaml, value, stat string
	}{
		{"No flags", one("", "foo*"), "foo1", "test-domain.wild_foo*"},
		{"value_to_metric", one("    value_to_metric: true\n", "foo*"), "foo1", "test-domain.wild_foo1"},
		{"share_threshold", one("    share_threshold: true\n", "foo*"), "foo1", "test-domain.wild_foo*"},
		{"share_threshold with value_to_metric", one("    share_threshold: true\n    value_to_metric: true\n", "foo*"), "foo1", "test-domain.wild_foo*"},
		{"middle+trailing, no flags", one("", "foo*bar*"), "foo123bar456", "test-domain.wild_foo*bar*"},
		{"middle+trailing, no flags, other value", one("", "foo*bar*"), "fooXbarY", "test-domain.wild_foo*bar*"},
		{"middle+trailing, value_to_metric", one("    value_to_metric: true\n", "foo*bar*"), "foo123bar456", "test-domain.wild_foo123bar456"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, memStore(t), c.yaml)
			expectLimit(t, c.name, h.get("test-domain", desc("wild", c.value)), 20, minute, c.stat)
		})
	}
	h := newHarness(t, memStore(t), `
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {unit: minute, requests_per_unit: 20}
`)
	expectLimit(t, "value_to_metric in other descriptor", h.get("test-domain", desc("wild", "foo1", "other", "bar", "limit", "X")), 20, minute, "test-domain.wild_foo*.other_bar.limit")
}

// TestRef_ConfigImpl_Metadata: metadata is accepted and the limits are the
// reference's; dynamic metadata is not sent (a difference, docs/rls.md).
func TestRef_ConfigImpl_Metadata(t *testing.T) {
	h := newHarness(t, memStore(t), `
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
        metadata:
          name: service_1
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      service_with_quota:
        name: service_2
`)
	expectLimit(t, "empty descriptor", h.get("test-domain", desc()), 0, 0, "")
	expectLimit(t, "subkey1", h.get("test-domain", desc("key1", "value1", "subkey1", "something")), 5, second, "test-domain.key1_value1.subkey1")
	expectLimit(t, "key2", h.get("test-domain", desc("key2", "something")), 20, minute, "test-domain.key2")
}

// typeUnit turns a response unit into an override's unit (the same
// numbers in envoy.type.v3.RateLimitUnit).
func typeUnit(u rlsv3.RateLimitResponse_RateLimit_Unit) typev3.RateLimitUnit {
	return typev3.RateLimitUnit(u)
}

package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNearHits restates the reference's arithmetic: limit 10, ratio 0.8,
// threshold 8.
func TestNearHits(t *testing.T) {
	for _, c := range []struct{ remaining, hits, want uint64 }{
		{9, 1, 0}, // used 1
		{2, 1, 0}, // used 8: at the threshold, not above
		{1, 1, 1}, // used 9
		{0, 3, 2}, // used 7 -> 10: 9 and 10 are near
		{0, 10, 2},
	} {
		if got := NearHits(10, c.remaining, c.hits, 0.8); got != c.want {
			t.Errorf("remaining %d hits %d: near %d, want %d", c.remaining, c.hits, got, c.want)
		}
	}
}

func TestRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	m.Record(Hit{Domain: "d", Rule: "key_value.sub.deeper", Hits: 1, Limit: 10, Remaining: 1})
	m.Record(Hit{Domain: "d", Rule: "key_value.sub.deeper", Hits: 2, Limit: 10, Remaining: 1, Over: true})
	m.Record(Hit{Domain: "d", Rule: "key_value.sub.deeper", Hits: 1, Limit: 10, Remaining: 0, Over: true, Shadow: true})
	m.ConfigLoaded(true)
	m.ConfigLoaded(false)
	m.ConfigLoaded(false)
	want := `
# HELP ratelimit_service_rate_limit_total_hits Hits asked for, by domain and rule.
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="key_value",key2="sub"} 4
# HELP ratelimit_service_rate_limit_over_limit Hits refused, by domain and rule.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key1="key_value",key2="sub"} 3
# HELP ratelimit_service_rate_limit_near_limit Hits admitted above the near-limit ratio of the limit, by domain and rule.
# TYPE ratelimit_service_rate_limit_near_limit counter
ratelimit_service_rate_limit_near_limit{domain="d",key1="key_value",key2="sub"} 1
# HELP ratelimit_service_rate_limit_within_limit Hits admitted, by domain and rule.
# TYPE ratelimit_service_rate_limit_within_limit counter
ratelimit_service_rate_limit_within_limit{domain="d",key1="key_value",key2="sub"} 1
# HELP ratelimit_service_rate_limit_shadow_mode Hits over the limit admitted by shadow mode, by domain and rule.
# TYPE ratelimit_service_rate_limit_shadow_mode counter
ratelimit_service_rate_limit_shadow_mode{domain="d",key1="key_value",key2="sub"} 1
# HELP ratelimit_service_config_load_success Rate limit configurations loaded.
# TYPE ratelimit_service_config_load_success counter
ratelimit_service_config_load_success 1
# HELP ratelimit_service_config_load_error Rate limit configurations refused; the last good one stays in force.
# TYPE ratelimit_service_config_load_error counter
ratelimit_service_config_load_error 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestSeriesBounded: detailed_metric puts request values in rule keys; the
// label sets stop growing at MaxSeries.
func TestSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxSeries + 500 {
		m.Record(Hit{Domain: "d", Rule: fmt.Sprintf("user_%d", i), Hits: 1, Limit: 10, Remaining: 9})
	}
	if n := testutil.CollectAndCount(m.totalHits); n != MaxSeries+1 {
		t.Fatalf("%d series, want %d (the bound and _other)", n, MaxSeries+1)
	}
	if v := testutil.ToFloat64(m.totalHits.WithLabelValues("d", otherKey, "")); v != 500 {
		t.Fatalf("_other counted %v hits, want 500", v)
	}
}

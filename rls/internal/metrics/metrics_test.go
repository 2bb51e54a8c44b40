package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	key := "d.key_value.sub.deeper"
	m.Record("d", key, Counts{Total: 1, Within: 1, Near: 1})
	m.Record("d", key, Counts{Total: 2, Over: 2})
	m.Record("d", key, Counts{Total: 1, Over: 1, Shadow: 1})
	m.Record("d", key, Counts{Total: 3})
	m.ConfigLoaded(true)
	m.ConfigLoaded(false)
	m.ConfigLoaded(false)
	want := `
# HELP ratelimit_service_rate_limit_total_hits Hits asked for, by domain and rule.
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="d",key1="key_value",key2="sub"} 7
# HELP ratelimit_service_rate_limit_over_limit Hits refused, by domain and rule.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="d",key1="key_value",key2="sub"} 3
# HELP ratelimit_service_rate_limit_near_limit Hits between the near-limit ratio of the limit and the limit, by domain and rule.
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
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_service_rate_limit_total_hits",
		"ratelimit_service_rate_limit_over_limit", "ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_within_limit",
		"ratelimit_service_rate_limit_shadow_mode", "ratelimit_service_config_load_success", "ratelimit_service_config_load_error"); err != nil {
		t.Fatal(err)
	}
}

// TestSeriesBounded: detailed_metric puts request values in rule keys; the
// label sets stop growing at MaxSeries.
func TestSeriesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxSeries + 500 {
		m.Record("d", fmt.Sprintf("d.user_%d", i), Counts{Total: 1, Within: 1})
	}
	if n := testutil.CollectAndCount(m.totalHits); n != MaxSeries+1 {
		t.Fatalf("%d series, want %d (the bound and _other)", n, MaxSeries+1)
	}
	if v := testutil.ToFloat64(m.totalHits.WithLabelValues("d", otherKey, "")); v != 500 {
		t.Fatalf("_other counted %v hits, want 500", v)
	}
}

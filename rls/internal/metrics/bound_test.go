package metrics

import (
	"strings"
	"testing"
)

// TestSanitizeAsTheReference restates the reference's SanitizeStatName
// cases (test/stats/manager_impl_test.go) and its IPv4 rule.
func TestSanitizeAsTheReference(t *testing.T) {
	for in, want := range map[string]string{
		"path_/foo/bar":                 "path_/foo/bar",
		"path_/foo:*:bar":               "path_/foo_*_bar",
		"path_/foo|bar|baz":             "path_/foo_bar_baz",
		"path_/foo:bar|baz":             "path_/foo_bar_baz",
		"edge.d_10.0.0.1":               "edge.d_10_0_0_1",
		"edge.d_10.0.0.1.sub_192.1.2.3": "edge.d_10_0_0_1.sub_192_1_2_3",
		"edge.v_1234.5.6.7":             "edge.v_1234_5_6_7", // the reference's pattern is unanchored
		"edge.v_1.2.3":                  "edge.v_1.2.3",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestLabelsOfBounded(t *testing.T) {
	m := &Metrics{series: map[labels]struct{}{}}
	long := strings.Repeat("x", 1<<20)
	a := m.labelsOf("d.user_a" + long + ".sub_" + long)
	b := m.labelsOf("d.user_b" + long + ".sub_" + long)
	for _, l := range []labels{a, b} {
		if len(l.key1) > MaxLabelBytes || len(l.key2) > MaxLabelBytes || l.domain != "d" {
			t.Fatalf("labels %d, %d bytes; want at most %d", len(l.key1), len(l.key2), MaxLabelBytes)
		}
	}
	if a.key1 == b.key1 {
		t.Errorf("two long values share a label: %q", a.key1)
	}
	if again := m.labelsOf("d.user_a" + long + ".sub_" + long); again != a {
		t.Errorf("one value, two labels: %q, %q", again.key1, a.key1)
	}
	if l := m.labelsOf("d.remote_address_10.0.0.1"); l.key1 != "remote_address_10_0_0_1" || l.key2 != "" {
		t.Errorf("an address under detailed_metric: %+v; want one label remote_address_10_0_0_1", l)
	}
}

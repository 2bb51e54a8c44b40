package ipmask

import "testing"

func TestMask(t *testing.T) {
	for _, tc := range []struct {
		key  string
		bits int
		want string
	}{
		{"2001:db8:1:2:aaaa::1", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:aaaa::1", 48, "2001:db8:1::/48"},
		{"2001:db8::1", 128, "2001:db8::1/128"},
		{"fe80::1%eth0", 64, "fe80::/64"},            // the zone is dropped
		{"192.0.2.1", 64, "192.0.2.1"},               // IPv4 kept
		{"::ffff:192.0.2.1", 64, "::ffff:192.0.2.1"}, // IPv4-mapped kept
		{"k-123", 64, "k-123"},                       // not an address
		{"", 64, ""},
	} {
		if got := Mask(tc.key, tc.bits); got != tc.want {
			t.Errorf("Mask(%q, %d) = %q, want %q", tc.key, tc.bits, got, tc.want)
		}
	}
}

func TestCheckBits(t *testing.T) {
	for _, b := range []int{1, 64, 128} {
		if err := CheckBits(b); err != nil {
			t.Errorf("CheckBits(%d): %v", b, err)
		}
	}
	for _, b := range []int{0, -1, 129} {
		if err := CheckBits(b); err == nil {
			t.Errorf("CheckBits(%d) accepted", b)
		}
	}
}

// Package ipmask masks IPv6 address keys to their network, for the
// IPv6Prefix key funcs of limiter/httplimit and limiter/grpclimit.
package ipmask

import (
	"fmt"
	"net/netip"
)

// CheckBits returns an error unless bits is a valid IPv6 prefix length.
func CheckBits(bits int) error {
	if bits < 1 || bits > 128 {
		return fmt.Errorf("IPv6 prefix length is %d; give 1 to 128 (64 is usual)", bits)
	}
	return nil
}

// Mask returns the network of the IPv6 address key, its first bits, such
// as "2001:db8:1:2::/64"; IPv4 (and IPv4-mapped) addresses, and keys that
// are not addresses, are returned as they are. A subscriber usually holds
// a whole /64 and could cycle through its addresses to reset a
// per-address limit.
func Mask(key string, bits int) string {
	a, err := netip.ParseAddr(key)
	if err != nil || !a.Is6() || a.Is4In6() {
		return key
	}
	p, err := a.WithZone("").Prefix(bits)
	if err != nil {
		return key
	}
	return p.String()
}

// Package ipmask reads and masks IP addresses the one way limitkit does:
// the address and CIDR entries of limiter.Config's Exempt and Deny lists,
// the trusted proxies of limiter/httplimit, and the IPv6Prefix key funcs
// of limiter/httplimit and limiter/grpclimit. Client addresses are
// normalised (Normalize) before they are matched or keyed.
package ipmask

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// CheckBits returns an error unless bits is a valid IPv6 prefix length.
func CheckBits(bits int) error {
	if bits < 1 || bits > 128 {
		return fmt.Errorf("IPv6 prefix length is %d; give 1 to 128 (64 is usual)", bits)
	}
	return nil
}

// Normalize returns a client address as it is keyed and matched: IPv4-mapped
// IPv6 as IPv4, without an IPv6 zone, so one client has one form.
func Normalize(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

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

// maxLen is the longest address or prefix text: netip's errors quote the
// input, and a longer one is no address anyway.
const maxLen = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128")

// LooksLikeAddr reports whether s is written as an address or a CIDR
// prefix is: hex digits, dots and colons (with a dot or a colon), an
// optional IPv6 zone ("%eth0") and an optional "/bits". Entries that look
// like addresses are read by Parse and must be valid; others are keys.
func LooksLikeAddr(s string) bool {
	front, bits, isNet := strings.Cut(s, "/")
	if isNet && !allDigits(bits) {
		return false
	}
	if i := strings.IndexByte(front, '%'); i >= 0 {
		front = front[:i]
	}
	if front == "" {
		return false
	}
	for _, c := range []byte(front) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '.' || c == ':') {
			return false
		}
	}
	return strings.ContainsAny(front, ".:")
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Parse reads an IP address (a prefix of its full length) or a CIDR
// prefix, strictly: no white space, no IPv6 zone (client addresses are
// matched without one), no host bits set beyond the prefix length
// ("10.1.2.3/8" is usually a typo for a narrower network, and widening it
// silently would match far more clients). IPv4-mapped entries are read as
// IPv4, as client addresses are. The error says what to write instead.
func Parse(s string) (netip.Prefix, error) {
	switch {
	case s == "":
		return netip.Prefix{}, errors.New("empty; write an IP address or a CIDR prefix such as 10.0.0.0/8")
	case len(s) > maxLen:
		return netip.Prefix{}, errors.New("too long for an IP address or a CIDR prefix")
	case strings.TrimSpace(s) != s:
		return netip.Prefix{}, errors.New("has white space around it; remove it")
	case strings.Contains(s, "%"):
		return netip.Prefix{}, errors.New("has an IPv6 zone (%...); leave it out: client addresses are matched without one")
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IP address or a CIDR prefix such as 10.0.0.0/8: %w", err)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil { // its error quotes s, already named by the caller
		return netip.Prefix{}, errors.New("not a valid CIDR prefix; write it like 10.0.0.0/8 or 2001:db8::/32")
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("has host bits set; write %s", m)
	}
	if a := p.Addr(); a.Is4In6() {
		// ::ffff:10.0.0.0/104 names IPv4 clients, which are unmapped.
		// Masked, a mapped prefix is at least /96.
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// Contains reports whether one of nets holds all of k (an address is a
// prefix of its full length).
func Contains(nets []netip.Prefix, k netip.Prefix) bool {
	for _, p := range nets {
		if p.Bits() <= k.Bits() && p.Contains(k.Addr()) {
			return true
		}
	}
	return false
}

// KeyPrefix reads a key that is an IP address (a prefix of its full length)
// or a network, such as the "2001:db8:1:2::/64" of an IPv6Prefix key func.
// The shape is checked first: a failed parse allocates its error.
func KeyPrefix(key string) (netip.Prefix, bool) {
	if !LooksLikeAddr(key) {
		return netip.Prefix{}, false
	}
	if strings.Contains(key, "/") {
		p, err := netip.ParsePrefix(key)
		if err != nil {
			return netip.Prefix{}, false
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p, true
	}
	a, err := netip.ParseAddr(key)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = Normalize(a)
	return netip.PrefixFrom(a, a.BitLen()), true
}

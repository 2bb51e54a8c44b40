package limiter

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/limitkit/limitkit/internal/boundid"
)

// ErrDenyListed is returned by Wait and WaitN for a key on the limit's deny
// list (Config.Deny): it would never be admitted, so they do not wait.
var ErrDenyListed = errors.New("limiter: key is on the deny list")

// lists is a limit's exemptions and deny list, parsed. A limit without
// either has none (compiled.lists is nil), so the hot path pays one pointer
// check.
type lists struct {
	exemptKeys, denyKeys map[string]struct{}
	exemptNets, denyNets []netip.Prefix
}

// verdict is what the lists say of a key.
type verdict uint8

const (
	unlisted   verdict = iota // decide it
	exempted                  // never limited
	denyListed                // always denied
)

// parseLists parses a Config's Exempt and Deny; nil when both are empty.
func parseLists(exempt, deny []string) (*lists, error) {
	if len(exempt)+len(deny) == 0 {
		return nil, nil
	}
	l := &lists{}
	var err error
	if l.exemptKeys, l.exemptNets, err = parseEntries("exempt", exempt); err != nil {
		return nil, err
	}
	if l.denyKeys, l.denyNets, err = parseEntries("deny", deny); err != nil {
		return nil, err
	}
	return l, nil
}

// parseEntries sorts entries into exact keys and address prefixes.
func parseEntries(field string, entries []string) (map[string]struct{}, []netip.Prefix, error) {
	var keys map[string]struct{}
	var nets []netip.Prefix
	for _, e := range entries {
		p, isAddr, err := parseEntry(e)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s entry %s: %w", ErrInvalidConfig, field, boundid.Quote(e), err)
		}
		if isAddr {
			nets = append(nets, p)
			continue
		}
		if keys == nil {
			keys = make(map[string]struct{})
		}
		keys[e] = struct{}{}
	}
	return keys, nets, nil
}

// parseEntry reads one entry: an IP address (a prefix of its full length),
// a CIDR prefix, or else an exact key. An entry with a "/bits" suffix whose
// front is made of address characters is meant as a prefix and must be a
// valid one, with no host bits set.
func parseEntry(e string) (netip.Prefix, bool, error) {
	if e == "" {
		return netip.Prefix{}, false, errors.New("empty; write a key, an IP address or a CIDR prefix")
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.WithZone("").Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true, nil
	}
	front, bits, ok := strings.Cut(e, "/")
	if !ok || !looksLikeAddr(front) || !allDigits(bits) {
		return netip.Prefix{}, false, nil
	}
	p, err := netip.ParsePrefix(e)
	if err != nil {
		return netip.Prefix{}, false, errors.New("not a valid CIDR prefix; write it like 10.0.0.0/8 or 2001:db8::/32")
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, false, fmt.Errorf("has host bits set; write %s", m)
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, true, nil
}

// looksLikeAddr reports whether s is made of the characters of an IP
// address, with a dot or a colon, before any IPv6 zone ("%eth0").
func looksLikeAddr(s string) bool {
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '.' || c == ':') {
			return false
		}
	}
	return strings.ContainsAny(s, ".:")
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

// check says what the lists say of key. A deny entry wins over an
// exemption. The key is parsed as an address, or a network wholly inside
// an entry, only when there are address entries.
func (l *lists) check(key string) verdict {
	if _, ok := l.denyKeys[key]; ok {
		return denyListed
	}
	exempt := false
	if _, ok := l.exemptKeys[key]; ok {
		exempt = true
	}
	if len(l.denyNets)+len(l.exemptNets) > 0 {
		if p, ok := keyPrefix(key); ok {
			if contains(l.denyNets, p) {
				return denyListed
			}
			exempt = exempt || contains(l.exemptNets, p)
		}
	}
	if exempt {
		return exempted
	}
	return unlisted
}

// keyPrefix reads a key that is an IP address (a prefix of its full
// length) or a network, such as the "2001:db8:1:2::/64" of httplimit's
// IPv6Prefix key funcs. The shape is checked first: a failed parse
// allocates its error.
func keyPrefix(key string) (netip.Prefix, bool) {
	front, bits, isNet := strings.Cut(key, "/")
	if !looksLikeAddr(front) || isNet && !allDigits(bits) {
		return netip.Prefix{}, false
	}
	if isNet {
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
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// contains reports whether one of nets holds all of k.
func contains(nets []netip.Prefix, k netip.Prefix) bool {
	for _, p := range nets {
		if p.Bits() <= k.Bits() && p.Contains(k.Addr()) {
			return true
		}
	}
	return false
}

// listed returns the decision for a listed key under c without a store
// call: exempt, an admission; deny-listed, a denial with no retry time (or,
// for a limit in Shadow mode, an admission that says it would have been
// denied). ok is false for a key on no list, or a limit without lists.
func (c *compiled) listed(key string) (d Decision, ok bool) {
	if c.lists == nil || key == "" {
		return Decision{}, false
	}
	limit := c.config.Limit
	switch c.lists.check(key) {
	case exempted:
		return Decision{Allowed: true, Exempt: true, Limit: limit, Remaining: limit}, true
	case denyListed:
		if c.config.Mode == Shadow {
			return Decision{Allowed: true, DenyListed: true, ShadowDenied: true, Limit: limit, Remaining: limit}, true
		}
		return Decision{DenyListed: true, Limit: limit}, true
	}
	return Decision{}, false
}

// denyListedError is WaitN's error for a deny-listed key.
func denyListedError(key string) error {
	return fmt.Errorf("limiter: wait for %s: %w", boundid.Quote(key), ErrDenyListed)
}

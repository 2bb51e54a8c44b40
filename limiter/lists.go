package limiter

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/limitkit/limitkit/internal/boundid"
	"github.com/limitkit/limitkit/limiter/internal/ipmask"
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
// a CIDR prefix, or else an exact key. An entry that parses as an address,
// or has a "/bits" suffix after address characters, is an address entry
// and must be a valid one (ipmask.Parse: no zone, no host bits set). White
// space around any entry is refused: it would make an exact key that no
// request has, silently.
func parseEntry(e string) (netip.Prefix, bool, error) {
	if e == "" {
		return netip.Prefix{}, false, errors.New("empty; write a key, an IP address or a CIDR prefix")
	}
	if strings.TrimSpace(e) != e {
		return netip.Prefix{}, false, errors.New("has white space around it; remove it")
	}
	if _, err := netip.ParseAddr(e); err != nil && !(strings.Contains(e, "/") && ipmask.LooksLikeAddr(e)) {
		return netip.Prefix{}, false, nil
	}
	p, err := ipmask.Parse(e)
	return p, true, err
}

// check says what the lists say of key. A deny entry wins over an
// exemption. The address entries apply to the key itself, when it is an
// address or a network (Allow's callers choose their keys).
func (l *lists) check(key string) verdict {
	if len(l.denyNets)+len(l.exemptNets) == 0 {
		return l.checkClient(key, netip.Prefix{})
	}
	p, _ := ipmask.KeyPrefix(key)
	return l.checkClient(key, p)
}

// checkClient says what the lists say of key from the client at p: the
// key entries apply to key, the address entries to p only (none when p is
// not valid).
func (l *lists) checkClient(key string, p netip.Prefix) verdict {
	if _, ok := l.denyKeys[key]; ok {
		return denyListed
	}
	_, exempt := l.exemptKeys[key]
	if p.IsValid() && len(l.denyNets)+len(l.exemptNets) > 0 {
		if ipmask.Contains(l.denyNets, p) {
			return denyListed
		}
		exempt = exempt || ipmask.Contains(l.exemptNets, p)
	}
	if exempt {
		return exempted
	}
	return unlisted
}

// listed returns the decision for a listed key under c without a store
// call: exempt, an admission; deny-listed, a denial with no retry time (or,
// for a limit in Shadow mode, an admission that says it would have been
// denied). ok is false for a key on no list, or a limit without lists.
func (c *compiled) listed(key string) (d Decision, ok bool) {
	if c.lists == nil || key == "" {
		return Decision{}, false
	}
	return c.verdictDecision(c.lists.check(key))
}

// listedClient is listed for a transport's request: the address entries
// apply to client only (see Request.Client), never to the key.
func (c *compiled) listedClient(key string, client netip.Addr) (d Decision, ok bool) {
	if c.lists == nil || key == "" {
		return Decision{}, false
	}
	var p netip.Prefix
	if client.IsValid() {
		a := ipmask.Normalize(client)
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return c.verdictDecision(c.lists.checkClient(key, p))
}

// verdictDecision is the decision for a listed key; ok is false for an
// unlisted one.
func (c *compiled) verdictDecision(v verdict) (d Decision, ok bool) {
	limit := c.config.Limit
	switch v {
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

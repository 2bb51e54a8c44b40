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

// parseLists parses a Config's Exempt and Deny, once, when the Config is
// checked; nil when both are empty. The engine consults them (engine.go).
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
			return nil, nil, invalidf(ErrInvalidConfig, "%s entry %s: %w", field, boundid.Quote(e), err)
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

// denyListedError is WaitN's error for a deny-listed key.
func denyListedError(key string) error {
	return fmt.Errorf("limiter: wait for %s: %w", boundid.Quote(key), ErrDenyListed)
}

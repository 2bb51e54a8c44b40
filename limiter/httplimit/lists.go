package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// WithExemptKeys lists keys that are never limited: their requests go
// straight to the next handler, with no store call, no rate-limit headers
// and no decision in the context. Write the keys as the key func returns
// them ("alice|GET /items/{id}" for a Join, "0:alice" for a FirstOf).
// Repeated options add to the list.
func WithExemptKeys(keys ...string) Option {
	return func(m *Middleware) error {
		return addKeys(&m.lists.exemptKeys, "exempt", keys)
	}
}

// WithDenyKeys lists keys that are always refused, with no store call, by
// the WithDenyHandler handler (403 Forbidden by default). A deny list
// entry wins over an exemption. Repeated options add to the list.
func WithDenyKeys(keys ...string) Option {
	return func(m *Middleware) error {
		return addKeys(&m.lists.denyKeys, "deny", keys)
	}
}

// WithExemptAddrs lists client addresses that are never limited, as IP
// addresses ("192.0.2.7", "2001:db8::1") or CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32"); an entry that does not parse is an error from New.
// IPv4-mapped IPv6 clients match IPv4 entries. The client address is the
// direct peer's (RemoteAddr) unless WithClientAddr says otherwise.
func WithExemptAddrs(prefixes ...string) Option {
	return func(m *Middleware) error {
		return addAddrs(&m.lists.exemptNets, "exempt", prefixes)
	}
}

// WithDenyAddrs lists client addresses or CIDR prefixes that are always
// refused, as WithDenyKeys; the syntax is WithExemptAddrs'.
func WithDenyAddrs(prefixes ...string) Option {
	return func(m *Middleware) error {
		return addAddrs(&m.lists.denyNets, "deny", prefixes)
	}
}

// WithClientAddr sets where the address lists find the client address: a
// key func returning an IP address, such as the ProxiedClientIP you key by
// behind a load balancer (default: ClientIP(), the direct peer). A request
// whose address does not parse matches no address entry.
func WithClientAddr(k KeyFunc) Option {
	return func(m *Middleware) error {
		if k == nil {
			return errors.New("httplimit: client address func is nil")
		}
		m.lists.addr = k
		return nil
	}
}

// WithDenyHandler sets the handler that answers requests on a deny list
// (default: 403 Forbidden with a short text body).
func WithDenyHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("httplimit: deny handler is nil")
		}
		m.lists.deny = h
		return nil
	}
}

// lists holds the exemptions and deny lists; the zero value is empty.
type lists struct {
	exemptKeys, denyKeys map[string]struct{}
	exemptNets, denyNets []netip.Prefix
	addr                 KeyFunc // nil: the direct peer
	deny                 http.Handler
}

// verdict is what the lists say of a request.
type verdict uint8

const (
	limit  verdict = iota // on no list: decide it
	exempt                // never limited
	deny                  // always refused
)

// check returns the request's key (when computed) and what the lists say.
// A deny entry wins over an exemption, whichever matched; the key func is
// not called for a request exempt by address when no key is denied.
func (l *lists) check(r *http.Request, key KeyFunc) (string, verdict) {
	exemptAddr := false
	if len(l.exemptNets)+len(l.denyNets) > 0 {
		if a, ok := l.clientAddr(r); ok {
			if contains(l.denyNets, a) {
				return "", deny
			}
			exemptAddr = contains(l.exemptNets, a)
		}
	}
	if exemptAddr && len(l.denyKeys) == 0 {
		return "", exempt
	}
	k := key(r)
	if _, ok := l.denyKeys[k]; ok && k != "" {
		return k, deny
	}
	if _, ok := l.exemptKeys[k]; exemptAddr || (ok && k != "") {
		return k, exempt
	}
	return k, limit
}

func (l *lists) clientAddr(r *http.Request) (netip.Addr, bool) {
	if l.addr == nil {
		return peerAddr(r)
	}
	a, err := netip.ParseAddr(l.addr(r))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func contains(nets []netip.Prefix, a netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

func addKeys(set *map[string]struct{}, list string, keys []string) error {
	if *set == nil {
		*set = make(map[string]struct{}, len(keys))
	}
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("httplimit: %s key is empty; list the keys as the key func returns them", list)
		}
		(*set)[k] = struct{}{}
	}
	return nil
}

func addAddrs(nets *[]netip.Prefix, list string, prefixes []string) error {
	for _, s := range prefixes {
		p, err := parseListPrefix(s)
		if err != nil {
			return fmt.Errorf("httplimit: %s address %q: %w", list, clip(s), err)
		}
		*nets = append(*nets, p)
	}
	return nil
}

// parseListPrefix parses an address or CIDR prefix of an address list.
// Unlike netip.ParsePrefix it rejects host bits set beyond the prefix
// length ("10.1.2.3/8"): such an entry is usually a typo for a narrower
// network, and silently widening it would exempt far more clients.
func parseListPrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if len(s) > len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128") {
		// netip's errors quote the input; a long one is no address anyway.
		return netip.Prefix{}, errors.New("too long for an IP address or a CIDR prefix")
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IP address or a CIDR prefix such as 10.0.0.0/8: %w", err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("has an IPv6 zone; leave it out")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR prefix such as 10.0.0.0/8: %w", err)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("has bits set after the first %d; write %s", p.Bits(), p.Masked())
	}
	if a := p.Addr(); a.Is4In6() {
		// ::ffff:10.0.0.0/104 names IPv4 clients, which are unmapped
		// before matching. Masked, a mapped prefix is at least /96.
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// clip shortens s for an error message: a list entry can come from a file.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/limitkit/limitkit/limiter/internal/ipmask"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
	"github.com/limitkit/limitkit/limiter/transport"
)

// KeyFunc names the subject a request is limited as: a client address, an
// API token, a user id, a route. It returns an empty Key when the request
// carries no key; the middleware then answers with its missing-key handler
// (400 by default) rather than guess. A func of your own returns
// Key{Value: id}; only funcs that derived the key from the client's
// address set Key.Client.
type KeyFunc func(r *http.Request) Key

// Key is what a KeyFunc found: Value is the key, and Client the client
// address it was derived from, when it was (ClientIP, ProxiedClientIP, and
// IPv6Prefix, Join or FirstOf of them). The address entries of
// limiter.Config.Exempt and Deny apply to Client only: a key a client
// writes itself, such as a header holding "10.9.9.9", never matches one.
type Key = transport.Key

// ClientIP keys requests by the address of the direct peer: RemoteAddr
// without its port. Forwarding headers (X-Forwarded-For, Forwarded) are
// ignored, because any client can write them. Behind a reverse proxy every
// request comes from the proxy; use ProxiedClientIP there.
//
// IPv4-mapped IPv6 addresses are keyed as IPv4 and zones are dropped, so one
// client has one key. A RemoteAddr that is not an IP address (a Unix socket
// listener) gives no key.
func ClientIP() KeyFunc {
	return func(r *http.Request) Key {
		if a, ok := peerAddr(r); ok {
			return transport.ClientKey(a)
		}
		return Key{}
	}
}

// ProxiedClientIP keys requests by client address behind reverse proxies.
//
// The header is read only when the direct peer (RemoteAddr) is one of the
// trusted proxies; otherwise the peer itself is the client, so a spoofed
// header from the open internet changes nothing. The header's addresses are
// walked from the right (the hop nearest to this server) skipping trusted
// proxies; the first untrusted address is the client. When every address is
// trusted the leftmost is used; an entry that is not an address (such as
// "unknown") stops the walk at the hop to its right, which vouched for it.
//
// header is the one your proxies set: "X-Forwarded-For" (the default when
// empty), "Forwarded" (RFC 7239, its for= parameters), or any other header
// holding a comma-separated list of addresses, such as "X-Real-IP". Only that
// header is read: a proxy that appends to X-Forwarded-For passes a client's
// own Forwarded header through untouched.
//
// trusted lists the proxies as addresses or CIDR networks ("10.0.0.0/8",
// "192.0.2.7", "2001:db8::/32"), read as limiter.Config's address entries
// are: an entry with white space, an IPv6 zone or host bits set
// ("10.1.2.3/8") is an error naming it, as is an empty list.
func ProxiedClientIP(header string, trusted ...string) (KeyFunc, error) {
	if len(trusted) == 0 {
		return nil, errors.New("httplimit: no trusted proxies; list your proxies' addresses or networks, or use ClientIP() to ignore forwarding headers")
	}
	nets := make([]netip.Prefix, 0, len(trusted))
	for _, s := range trusted {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, err
		}
		nets = append(nets, p)
	}
	if header == "" {
		header = "X-Forwarded-For"
	}
	header = http.CanonicalHeaderKey(strings.TrimSpace(header))
	if header == "" || strings.ContainsAny(header, " \t:\r\n") {
		return nil, fmt.Errorf("httplimit: %q is not a header name", header)
	}
	t := &proxies{nets: nets, header: header, forwarded: header == "Forwarded"}
	return t.clientIP, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := ipmask.Parse(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("httplimit: trusted proxy %s: %w", ratelimitfields.Quote(clip(s)), err)
	}
	return p, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

type proxies struct {
	nets      []netip.Prefix
	header    string
	forwarded bool
}

func (p *proxies) trusts(a netip.Addr) bool {
	for _, n := range p.nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

func (p *proxies) clientIP(r *http.Request) Key {
	peer, ok := peerAddr(r)
	if !ok {
		return Key{}
	}
	if !p.trusts(peer) {
		return transport.ClientKey(peer)
	}
	var hops []string
	for _, v := range r.Header.Values(p.header) {
		if p.forwarded {
			hops = append(hops, forwardedFor(v)...)
		} else {
			hops = append(hops, strings.Split(v, ",")...)
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break // nothing left of an unparsable hop can be trusted
		}
		client = a
		if !p.trusts(a) {
			break
		}
	}
	return transport.ClientKey(client)
}

// peerAddr returns the direct peer's address, from RemoteAddr.
func peerAddr(r *http.Request) (netip.Addr, bool) {
	// RemoteAddr is "ip:port" from net/http: parse that form first, which
	// costs no allocation (a failed ParseAddr allocates its error).
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ipmask.Normalize(ap.Addr()), true
	}
	return parseHop(r.RemoteAddr)
}

// parseHop parses an address as found in RemoteAddr or a forwarding header:
// with or without a port, IPv6 with or without brackets, possibly quoted.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return ipmask.Normalize(a), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return ipmask.Normalize(a), true
		}
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return ipmask.Normalize(a), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor returns the for= values of a Forwarded header (RFC 7239), one
// per element, in order. An element without for= yields "" (not an address),
// so that the walk stops there.
func forwardedFor(v string) []string {
	var out []string
	for _, elem := range splitQuoted(v, ',') {
		if strings.TrimSpace(elem) == "" {
			continue
		}
		val := ""
		for _, pair := range splitQuoted(elem, ';') {
			name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
				val = unquote(strings.TrimSpace(value))
				break
			}
		}
		out = append(out, val)
	}
	return out
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote removes the quotes and escapes of an RFC 7230 quoted-string; other
// values are returned as they are.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '\\' && i+1 < len(s)-1 {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IPv6Prefix keys IPv6 clients by their network instead of their address:
// the address key found by key (ClientIP or ProxiedClientIP) is masked to
// its first bits, so "2001:db8:1:2:aaaa::1" becomes "2001:db8:1:2::/64".
// A subscriber usually gets a whole /64 and can cycle through its addresses
// to reset a per-address limit; 64 is the usual choice. IPv4 keys, and keys
// that are not addresses, are kept as they are; the client address stays
// the client's (for the address lists). bits must be 1 to 128.
func IPv6Prefix(bits int, key KeyFunc) (KeyFunc, error) {
	k, err := transport.IPv6Prefix(bits, key)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return k, nil
}

// Header keys requests by the first value of the named request header, such
// as an API key ("X-Api-Key"), trimmed of spaces. A missing or blank header
// gives no key. The key is not a client address, whatever it holds.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) Key {
		return Key{Value: strings.TrimSpace(r.Header.Get(name))}
	}
}

// FromContext keys requests by what fn finds in the request's context,
// typically the user id an authentication middleware stored there (so the
// limiter must run after it). fn returns "" for an anonymous request.
func FromContext(fn func(ctx context.Context) string) KeyFunc {
	return func(r *http.Request) Key {
		if fn == nil {
			return Key{}
		}
		return Key{Value: fn(r.Context())}
	}
}

// Route keys requests by the route they match, so each route gets its own
// allowance: the ServeMux pattern ("GET /items/{id}") when known, otherwise
// the method and path ("GET /items/42").
//
// When the middleware runs inside a ServeMux (mux.Handle(pattern,
// mw.Handler(h))), r.Pattern is already set. When it wraps the whole mux,
// pass that mux, and the pattern is looked up with mux.Handler; with a nil
// mux, or for a request no pattern matches, the method and path are used.
// Paths are chosen by clients, so a path key gives each distinct path its
// own allowance; prefer patterns.
func Route(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) Key {
		if r.Pattern != "" {
			return Key{Value: r.Pattern}
		}
		if mux != nil {
			if _, pattern := mux.Handler(r); pattern != "" {
				return Key{Value: pattern}
			}
		}
		if r.URL == nil {
			return Key{Value: r.Method}
		}
		return Key{Value: r.Method + " " + r.URL.Path}
	}
}

// Join keys requests by several keys at once, such as the client address on
// each route: Join(ClientIP(), Route(mux)). Every part must be found (a nil
// part finds none), or the request has no key. Parts are joined with '|',
// escaped so that different parts never make the same key. The client
// address is the first part's that has one.
func Join(keys ...KeyFunc) KeyFunc { return transport.Join(funcs(keys)) }

// FirstOf keys requests by the first of keys that finds one (nil ones are
// skipped), such as the user id for signed-in users and the client address
// for the rest: FirstOf(FromContext(userID), ClientIP()). The key is
// prefixed with the position of the extractor that found it ("0:alice",
// "1:192.0.2.1"), so a user named like an address never shares an
// allowance with that address; it is a client address when that
// extractor's was.
func FirstOf(keys ...KeyFunc) KeyFunc { return transport.FirstOf(funcs(keys)) }

func funcs(keys []KeyFunc) []func(*http.Request) Key {
	fs := make([]func(*http.Request) Key, len(keys))
	for i, k := range keys {
		fs[i] = k
	}
	return fs
}

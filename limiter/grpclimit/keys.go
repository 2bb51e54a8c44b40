package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/limitkit/limitkit/limiter/internal/ipmask"
)

// KeyFunc names the subject a call is limited as: a client address, an
// API key, a tenant, the method. It returns "" when the call carries no
// key; the call then fails with codes.InvalidArgument. Any func of this
// type is a key: read what an authentication interceptor stored in ctx, say
// (chain it before the limiter).
type KeyFunc func(ctx context.Context, fullMethod string) string

// FullMethod keys calls by their full method, "/package.Service/Method",
// so each method gets its own allowance shared by all clients. Join it with
// a client key for per-client, per-method limits.
func FullMethod() KeyFunc {
	return func(_ context.Context, fullMethod string) string { return fullMethod }
}

// PeerAddr keys calls by the address of the direct peer, without its port.
// IPv4-mapped IPv6 addresses are keyed as IPv4 and zones are dropped, so
// one client has one key. A peer that is not an IP address (a Unix socket)
// gives no key. Behind a proxy every call comes from the proxy: key by
// what the proxy vouches for instead.
func PeerAddr() KeyFunc {
	return func(ctx context.Context, _ string) string {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		if a, ok := addrOf(p.Addr); ok {
			return a.String()
		}
		return ""
	}
}

// addrOf returns the IP address of a peer address.
func addrOf(addr net.Addr) (netip.Addr, bool) {
	var a netip.Addr
	switch v := addr.(type) {
	case *net.TCPAddr:
		a = v.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	if !a.IsValid() {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// IPv6Prefix keys IPv6 clients by their network instead of their address:
// the address key found by key (PeerAddr) is masked to its first bits, so
// "2001:db8:1:2:aaaa::1" becomes "2001:db8:1:2::/64". A subscriber usually
// holds a whole /64 and could cycle through its addresses; 64 is the usual
// choice. IPv4 keys, and keys that are not addresses, are kept as they
// are. bits must be 1 to 128.
func IPv6Prefix(bits int, key KeyFunc) (KeyFunc, error) {
	if err := ipmask.CheckBits(bits); err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	if key == nil {
		return nil, errors.New("grpclimit: key func is nil")
	}
	return func(ctx context.Context, method string) string {
		return ipmask.Mask(key(ctx, method), bits)
	}, nil
}

// Metadata keys calls by the first value of the named request metadata
// key, such as an API key ("x-api-key"), trimmed of spaces. Names are
// case-insensitive. A missing or blank value gives no key.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(strings.TrimSpace(name))
	return func(ctx context.Context, _ string) string {
		if name == "" {
			return ""
		}
		// ValueFromIncomingContext does not copy the whole metadata.
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 {
			return ""
		}
		return strings.TrimSpace(vs[0])
	}
}

// Join keys calls by several keys at once, such as the client address on
// each method: Join(PeerAddr(), FullMethod()). Every part must be found, or
// the call has no key. Parts are joined with '|', escaped so that different
// parts never make the same key.
func Join(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) string {
		var b strings.Builder
		for j, k := range keys {
			if k == nil {
				return ""
			}
			part := k(ctx, method)
			if part == "" {
				return ""
			}
			if j > 0 {
				b.WriteByte('|')
			}
			for n := 0; n < len(part); n++ {
				if c := part[n]; c == '|' || c == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(part[n])
			}
		}
		return b.String()
	}
}

// FirstOf keys calls by the first of keys that finds one, such as the API
// key when sent and the peer address otherwise:
// FirstOf(Metadata("x-api-key"), PeerAddr()). The key is prefixed with the
// position of the func that found it ("0:k-123", "1:192.0.2.1"), so an API
// key written like an address never shares that address's allowance.
func FirstOf(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, method string) string {
		for j, k := range keys {
			if k == nil {
				continue
			}
			if key := k(ctx, method); key != "" {
				return strconv.Itoa(j) + ":" + key
			}
		}
		return ""
	}
}

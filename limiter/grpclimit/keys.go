package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/limitkit/limitkit/limiter/transport"
)

// KeyFunc names the subject a call is limited as: a client address, an
// API key, a tenant, the method. It returns an empty Key when the call
// carries no key; the call then fails with codes.InvalidArgument. Any func
// of this type is a key: read what an authentication interceptor stored in
// ctx, say (chain it before the limiter), and return Key{Value: id}; only
// funcs that derived the key from the peer's address set Key.Client.
type KeyFunc func(ctx context.Context, fullMethod string) Key

// Key is what a KeyFunc found: Value is the key, and Client the client
// address it was derived from, when it was (PeerAddr, and IPv6Prefix, Join
// or FirstOf of it). The address entries of limiter.Config.Exempt and Deny
// apply to Client only: a key a client sends itself, such as metadata
// holding "10.9.9.9", never matches one.
type Key = transport.Key

// onCall is k as the transport core calls it.
func (k KeyFunc) onCall(c call) Key { return k(c.ctx, c.method) }

// FullMethod keys calls by their full method, "/package.Service/Method",
// so each method gets its own allowance shared by all clients. Join it with
// a client key for per-client, per-method limits.
func FullMethod() KeyFunc {
	return func(_ context.Context, fullMethod string) Key { return Key{Value: fullMethod} }
}

// PeerAddr keys calls by the address of the direct peer, without its port.
// IPv4-mapped IPv6 addresses are keyed as IPv4 and zones are dropped, so
// one client has one key. A peer that is not an IP address (a Unix socket)
// gives no key. Behind a proxy every call comes from the proxy: key by
// what the proxy vouches for instead.
func PeerAddr() KeyFunc {
	return func(ctx context.Context, _ string) Key {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return Key{}
		}
		if a, ok := addrOf(p.Addr); ok {
			return transport.ClientKey(a)
		}
		return Key{}
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
	return a, a.IsValid()
}

// IPv6Prefix keys IPv6 clients by their network instead of their address:
// the address key found by key (PeerAddr) is masked to its first bits, so
// "2001:db8:1:2:aaaa::1" becomes "2001:db8:1:2::/64". A subscriber usually
// holds a whole /64 and could cycle through its addresses; 64 is the usual
// choice. IPv4 keys, and keys that are not addresses, are kept as they
// are; the client address stays the peer's (for the address lists). bits
// must be 1 to 128.
func IPv6Prefix(bits int, key KeyFunc) (KeyFunc, error) {
	var inner func(call) Key
	if key != nil {
		inner = key.onCall
	}
	k, err := transport.IPv6Prefix(bits, inner)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return fromCall(k), nil
}

// Metadata keys calls by the first value of the named request metadata
// key, such as an API key ("x-api-key"), trimmed of spaces. Names are
// case-insensitive. A missing or blank value gives no key. The key is not
// a client address, whatever it holds.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(strings.TrimSpace(name))
	return func(ctx context.Context, _ string) Key {
		if name == "" {
			return Key{}
		}
		// ValueFromIncomingContext does not copy the whole metadata.
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 {
			return Key{}
		}
		return Key{Value: strings.TrimSpace(vs[0])}
	}
}

// Join keys calls by several keys at once, such as the client address on
// each method: Join(PeerAddr(), FullMethod()). Every part must be found (a
// nil part finds none), or the call has no key. Parts are joined with '|',
// escaped so that different parts never make the same key. The client
// address is the first part's that has one.
func Join(keys ...KeyFunc) KeyFunc { return fromCall(transport.Join(onCalls(keys))) }

// FirstOf keys calls by the first of keys that finds one (nil ones are
// skipped), such as the API key when sent and the peer address otherwise:
// FirstOf(Metadata("x-api-key"), PeerAddr()). The key is prefixed with the
// position of the func that found it ("0:k-123", "1:192.0.2.1"), so an API
// key written like an address never shares that address's allowance; it
// is a client address when that func's was.
func FirstOf(keys ...KeyFunc) KeyFunc { return fromCall(transport.FirstOf(onCalls(keys))) }

func onCalls(keys []KeyFunc) []func(call) Key {
	fs := make([]func(call) Key, len(keys))
	for i, k := range keys {
		if k != nil {
			fs[i] = k.onCall
		}
	}
	return fs
}

func fromCall(k func(call) Key) KeyFunc {
	return func(ctx context.Context, method string) Key { return k(call{ctx: ctx, method: method}) }
}

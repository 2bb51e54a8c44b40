package grpclimit_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/limitkit/limitkit/limiter/grpclimit"
)

func fromPeer(addr net.Addr) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestPeerAddr(t *testing.T) {
	key := grpclimit.PeerAddr()
	for _, c := range []struct {
		ctx  context.Context
		want string
	}{
		{fromPeer(tcp("192.0.2.1:5000")), "192.0.2.1"},
		{fromPeer(tcp("[::ffff:192.0.2.1]:5000")), "192.0.2.1"},
		{fromPeer(tcp("[2001:db8::1%eth0]:5000")), "2001:db8::1"},
		{fromPeer(&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}), ""},
		{context.Background(), ""},
	} {
		k := key(c.ctx, "/a/B")
		assert.Equal(t, c.want, k.Value)
		assert.Equal(t, c.want != "", k.Client.IsValid(), "a peer key is a client address")
	}
}

func TestIPv6Prefix(t *testing.T) {
	key, err := grpclimit.IPv6Prefix(64, grpclimit.PeerAddr())
	assert.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", key(fromPeer(tcp("[2001:db8:1:2:aaaa::1]:5000")), "/a/B").Value)
	assert.Equal(t, "2001:db8:1:2::/64", key(fromPeer(tcp("[2001:db8:1:2:bbbb::9]:5000")), "/a/B").Value, "one /64, one key")
	assert.Equal(t, "192.0.2.1", key(fromPeer(tcp("192.0.2.1:5000")), "/a/B").Value, "IPv4 kept")
	assert.Equal(t, "", key(context.Background(), "/a/B").Value)
	for _, bits := range []int{0, 129, -1} {
		_, err := grpclimit.IPv6Prefix(bits, grpclimit.PeerAddr())
		assert.Error(t, err, bits)
	}
	_, err = grpclimit.IPv6Prefix(64, nil)
	assert.Error(t, err)
}

// TestMetadataJoinFirstOf: metadata keys are never client addresses; Join
// and FirstOf (tested in the transport core) carry the peer's address.
func TestMetadataJoinFirstOf(t *testing.T) {
	ctx := metadata.NewIncomingContext(fromPeer(tcp("192.0.2.1:5000")), metadata.Pairs("x-api-key", " k|1 ", "x-tenant", "10.9.9.9"))
	assert.Equal(t, grpclimit.Key{Value: "k|1"}, grpclimit.Metadata("X-Api-Key")(ctx, "/a/B"))
	assert.Equal(t, grpclimit.Key{Value: "10.9.9.9"}, grpclimit.Metadata("x-tenant")(ctx, "/a/B"), "an address in metadata is no client address")
	assert.Equal(t, grpclimit.Key{}, grpclimit.Metadata("x-other")(ctx, "/a/B"))
	assert.Equal(t, grpclimit.Key{}, grpclimit.Metadata("")(ctx, "/a/B"))

	peerAddr := netip.MustParseAddr("192.0.2.1")
	join := grpclimit.Join(grpclimit.Metadata("x-api-key"), grpclimit.PeerAddr(), grpclimit.FullMethod())
	assert.Equal(t, grpclimit.Key{Value: `k\|1|192.0.2.1|/a/B`, Client: peerAddr}, join(ctx, "/a/B"))
	assert.Equal(t, grpclimit.Key{}, grpclimit.Join(nil, grpclimit.FullMethod())(ctx, "/a/B"), "a nil part")

	first := grpclimit.FirstOf(nil, grpclimit.Metadata("x-other"), grpclimit.PeerAddr())
	assert.Equal(t, grpclimit.Key{Value: "2:192.0.2.1", Client: peerAddr}, first(ctx, "/a/B"))
	assert.Equal(t, grpclimit.Key{}, first(context.Background(), "/a/B"))
}

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
		assert.Equal(t, c.want, key(c.ctx, "/a/B"))
	}
}

func TestIPv6Prefix(t *testing.T) {
	key, err := grpclimit.IPv6Prefix(64, grpclimit.PeerAddr())
	assert.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", key(fromPeer(tcp("[2001:db8:1:2:aaaa::1]:5000")), "/a/B"))
	assert.Equal(t, "2001:db8:1:2::/64", key(fromPeer(tcp("[2001:db8:1:2:bbbb::9]:5000")), "/a/B"), "one /64, one key")
	assert.Equal(t, "192.0.2.1", key(fromPeer(tcp("192.0.2.1:5000")), "/a/B"), "IPv4 kept")
	assert.Equal(t, "", key(context.Background(), "/a/B"))
	for _, bits := range []int{0, 129, -1} {
		_, err := grpclimit.IPv6Prefix(bits, grpclimit.PeerAddr())
		assert.Error(t, err, bits)
	}
	_, err = grpclimit.IPv6Prefix(64, nil)
	assert.Error(t, err)
}

func TestMetadataJoinFirstOf(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", " k|1 ", "x-tenant", "acme"))
	assert.Equal(t, "k|1", grpclimit.Metadata("X-Api-Key")(ctx, "/a/B"))
	assert.Equal(t, "", grpclimit.Metadata("x-other")(ctx, "/a/B"))
	assert.Equal(t, "", grpclimit.Metadata("")(ctx, "/a/B"))

	join := grpclimit.Join(grpclimit.Metadata("x-api-key"), grpclimit.FullMethod())
	assert.Equal(t, `k\|1|/a/B`, join(ctx, "/a/B"))
	// Escaping keeps ("a|b", "c") and ("a", "b|c") apart.
	ab := func(context.Context, string) string { return "a|b" }
	a := func(context.Context, string) string { return "a" }
	c := func(context.Context, string) string { return "c" }
	bc := func(context.Context, string) string { return "b|c" }
	assert.NotEqual(t, grpclimit.Join(ab, c)(ctx, ""), grpclimit.Join(a, bc)(ctx, ""))
	assert.Equal(t, "", grpclimit.Join(grpclimit.Metadata("x-other"), grpclimit.FullMethod())(ctx, "/a/B"), "a missing part")
	assert.Equal(t, "", grpclimit.Join(nil, a)(ctx, ""), "a nil part")

	first := grpclimit.FirstOf(nil, grpclimit.Metadata("x-other"), grpclimit.Metadata("x-tenant"))
	assert.Equal(t, "2:acme", first(ctx, "/a/B"))
	assert.Equal(t, "", first(context.Background(), "/a/B"))
}

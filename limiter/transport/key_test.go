package transport

import (
	"net/netip"
	"testing"
)

// req is a request of the tests: named parts, looked up by the key funcs.
type req map[string]string

func part(name string) func(req) Key {
	return func(r req) Key { return Key{Value: r[name]} }
}

func addr(name string) func(req) Key {
	return func(r req) Key {
		a, err := netip.ParseAddr(r[name])
		if err != nil {
			return Key{}
		}
		return ClientKey(a)
	}
}

func TestJoinAndFirstOf(t *testing.T) {
	client := netip.MustParseAddr("192.0.2.1")
	join := Join([]func(req) Key{part("a"), addr("ip"), part("b")})
	for _, tc := range []struct {
		name string
		got  Key
		want Key
	}{
		{"every part", join(req{"a": "1", "ip": "192.0.2.1", "b": "2"}), Key{Value: "1|192.0.2.1|2", Client: client}},
		{"a missing part", join(req{"a": "1", "ip": "192.0.2.1"}), Key{}},
		{"escaped", Join([]func(req) Key{part("a"), part("b")})(req{"a": `x|\`, "b": "y"}), Key{Value: `x\|\\|y`}},
		{"a nil part", Join([]func(req) Key{nil, part("a")})(req{"a": "1"}), Key{}},
		{"first finds", FirstOf([]func(req) Key{nil, part("a"), addr("ip")})(req{"a": "alice", "ip": "192.0.2.1"}), Key{Value: "1:alice"}},
		{"first falls back", FirstOf([]func(req) Key{part("a"), addr("ip")})(req{"ip": "::ffff:192.0.2.1"}), Key{Value: "1:192.0.2.1", Client: client}},
		{"first finds none", FirstOf([]func(req) Key{part("a")})(req{}), Key{}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	// Escaping keeps ("a|b", "c") and ("a", "b|c") apart.
	j := Join([]func(req) Key{part("x"), part("y")})
	if j(req{"x": "a|b", "y": "c"}) == j(req{"x": "a", "y": "b|c"}) {
		t.Error("two different pairs of parts made one key")
	}
	// A user named like an address does not share that address's key.
	f := FirstOf([]func(req) Key{part("a"), addr("ip")})
	if f(req{"a": "192.0.2.1"}).Value == f(req{"ip": "192.0.2.1"}).Value {
		t.Error("FirstOf gave a name and an address one key")
	}
}

func TestIPv6PrefixKeepsTheClient(t *testing.T) {
	k, err := IPv6Prefix(64, addr("ip"))
	if err != nil {
		t.Fatal(err)
	}
	got := k(req{"ip": "2001:db8:1:2:aaaa::1"})
	if want := (Key{Value: "2001:db8:1:2::/64", Client: netip.MustParseAddr("2001:db8:1:2:aaaa::1")}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := IPv6Prefix(0, addr("ip")); err == nil {
		t.Error("a prefix length of 0 was accepted")
	}
	if _, err := IPv6Prefix[req](64, nil); err == nil {
		t.Error("a nil key func was accepted")
	}
}

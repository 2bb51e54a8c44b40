package transport

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"github.com/limitkit/limitkit/limiter/internal/ipmask"
)

// Key is what a key func found for a request.
type Key struct {
	// Value is the key; "" when the request carries none.
	Value string
	// Client is the client address Value was derived from, when it was:
	// the address entries of limiter.Config's Exempt and Deny lists apply
	// to it, and to nothing else. The zero Addr says Value is not a client
	// address (a header, a user id): only exact key entries apply.
	Client netip.Addr
}

// ClientKey is the key of a client address, normalised (ipmask.Normalize).
func ClientKey(a netip.Addr) Key {
	a = ipmask.Normalize(a)
	return Key{Value: a.String(), Client: a}
}

// Join keys by every part at once, joined with '|' and escaped so that
// different parts never make the same key. Every part must find a key
// (a nil part finds none), or there is none. The client address is the
// first part's that has one: Join(ClientIP, Route) is still that client's.
func Join[R any](parts []func(R) Key) func(R) Key {
	return func(r R) Key {
		var b strings.Builder
		var client netip.Addr
		for i, k := range parts {
			if k == nil {
				return Key{}
			}
			part := k(r)
			if part.Value == "" {
				return Key{}
			}
			if !client.IsValid() {
				client = part.Client
			}
			if i > 0 {
				b.WriteByte('|')
			}
			for n := 0; n < len(part.Value); n++ {
				if c := part.Value[n]; c == '|' || c == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(part.Value[n])
			}
		}
		return Key{Value: b.String(), Client: client}
	}
}

// FirstOf keys by the first part that finds a key (nil parts are
// skipped), prefixed with its position ("0:alice", "1:192.0.2.1") so that
// a user named like an address never shares that address's allowance. The
// client address is the finding part's.
func FirstOf[R any](parts []func(R) Key) func(R) Key {
	return func(r R) Key {
		for i, k := range parts {
			if k == nil {
				continue
			}
			if key := k(r); key.Value != "" {
				key.Value = strconv.Itoa(i) + ":" + key.Value
				return key
			}
		}
		return Key{}
	}
}

// IPv6Prefix masks the IPv6 address key found by key to its first bits
// (ipmask.Mask), keeping its client address. bits must be 1 to 128.
func IPv6Prefix[R any](bits int, key func(R) Key) (func(R) Key, error) {
	if err := ipmask.CheckBits(bits); err != nil {
		return nil, err
	}
	if key == nil {
		return nil, errors.New("key func is nil")
	}
	return func(r R) Key {
		k := key(r)
		k.Value = ipmask.Mask(k.Value, bits)
		return k
	}, nil
}

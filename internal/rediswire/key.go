package rediswire

// Key names.
//
// A key is prefix + "{" + tag + "}" + suffix. The braces make tag the Redis
// Cluster hash tag, so every key of one id (all algorithms) lands in one slot
// and a script that touches several of them never fails with CROSSSLOT.
//
// The tag is the id itself when that is safe: non-empty, at most MaxRawID
// bytes, no brace, and not starting with HashMarker. Any other id (huge,
// with a brace that would end or restart the tag, or empty) is replaced by
// HashMarker followed by the unpadded base64url SHA-256 of the id. So keys
// are bounded in size, and two ids never share a key (up to SHA-256
// collisions): a safe id never starts with the marker, so it cannot pose as
// the digest of another. Prefixes never contain braces (backend.Key.Validate
// rejects them), so the first "{" of a key is always the tag's.

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

const (
	// MaxRawID is the longest id used as its own hash tag.
	MaxRawID = 64
	// HashMarker starts the tag of every id that is replaced by its digest.
	HashMarker = '#'
	// hashedLen is the length of a digest tag: the marker and 43 base64
	// characters for 32 bytes.
	hashedLen = 1 + 43
)

// Safe reports whether id is used as its own hash tag.
func Safe(id string) bool {
	if id == "" || len(id) > MaxRawID || id[0] == HashMarker {
		return false
	}
	return strings.IndexByte(id, '{') < 0 && strings.IndexByte(id, '}') < 0
}

// Build returns prefix + "{" + tag(id) + "}" + suffix in one allocation.
// prefix and suffix must not contain braces.
func Build(prefix, id, suffix string) string {
	safe := Safe(id)
	tagLen := len(id)
	if !safe {
		tagLen = hashedLen
	}
	var b strings.Builder
	b.Grow(len(prefix) + tagLen + len(suffix) + 2)
	b.WriteString(prefix)
	b.WriteByte('{')
	if safe {
		b.WriteString(id)
	} else {
		sum := sha256.Sum256([]byte(id))
		var enc [hashedLen]byte
		enc[0] = HashMarker
		base64.RawURLEncoding.Encode(enc[1:], sum[:])
		b.Write(enc[:])
	}
	b.WriteByte('}')
	b.WriteString(suffix)
	return b.String()
}

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = 16384

// Slot returns the cluster hash slot of a key, as CLUSTER KEYSLOT does:
// CRC16 of the key, or of its hash tag (the text between the first "{" and
// the next "}", when not empty), modulo NumSlots.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % NumSlots
}

// SameSlot reports whether all keys hash to one cluster slot, so one
// script may touch them all.
func SameSlot(keys []string) bool {
	for _, k := range keys[min(1, len(keys)):] {
		if Slot(k) != Slot(keys[0]) {
			return false
		}
	}
	return true
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), Redis
// Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Key returns the Redis key holding key's state under alg.
func Key(key backend.Key, rule algorithms.Rule) string {
	return Build(key.Prefix, key.ID, rule.KeySuffix())
}

// StateKey returns the key req's script is called with at req's time: the
// Redis key of req's state (Key), or for a fixed window the key of the
// window holding req.Now (NativeKey's), which its script counts in as
// given: a script touches only the keys it is passed (Dragonfly refuses
// others, a Cluster cannot route them; issue 43, item 13). Under server
// time the window is the server's: the script is passed Key and names the
// window's key itself (see fixed_window.lua).
func StateKey(req *backend.Request) string {
	if req.Exact.Base != "" {
		return req.Exact.Name(req.Millis(), req.Rule.Window)
	}
	if req.Rule.PerWindow() {
		now, w := req.Millis(), req.Rule.Window.Milliseconds()
		return WindowKey(req.Key, req.Rule, now-now%w)
	}
	return Key(req.Key, req.Rule)
}

// RefundKey returns the key a refund of req's take recorded at at (the
// fifth value of its reply) is called with: StateKey, or for a fixed
// window's library key the key of the window the take counted in (at, its
// start), so that the script touches only that key.
func RefundKey(req *backend.Request, at int64) string {
	if req.Exact.Base != "" || !req.Rule.PerWindow() {
		return StateKey(req)
	}
	return WindowKey(req.Key, req.Rule, at)
}

// WindowKey returns the key of a fixed window's count for the window
// starting at start (ms): Key, ':' and the start.
func WindowKey(key backend.Key, rule algorithms.Rule, start int64) string {
	return Key(key, rule) + ":" + strconv.FormatInt(start, 10)
}

// NativeKey returns the key a fixed window request counts in (the window
// holding its time), the window's start (ms) and the key's expiry (ms)
// after the request's increment: the script's (key_ttl), or the exact
// key's.
func NativeKey(req *backend.Request) (key string, start, expiry int64) {
	now, w := req.Millis(), req.Rule.Window.Milliseconds()
	start = now - now%w
	if req.Exact.Base != "" {
		exp := req.Exact.Expiry
		if exp == 0 {
			exp = req.Rule.Window
		}
		return req.Exact.Name(now, req.Rule.Window), start, exp.Milliseconds()
	}
	return WindowKey(req.Key, req.Rule, start), start, req.Rule.KeyTTL(start + w - now)
}

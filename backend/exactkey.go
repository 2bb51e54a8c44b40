package backend

import (
	"fmt"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// ExactKey names the Redis keys of a fixed window the way another rate
// limiter names them, so that both count in the same keys: the rate limit
// service (package rls) sets it to count where envoyproxy/ratelimit
// counts, so a fleet running both shares one count per limit. The key of
// the window holding a request's Now is Base followed by the window's
// start in whole seconds since the Unix epoch. The zero value leaves key
// names to the store.
//
// Only the Redis stores read it, and only for FixedWindow rules of whole
// seconds; other stores count under Request.Key as usual (Key must still
// name the limit: wrappers such as the deny cache keep their state by it).
// Reset does not reach keys named this way: they are the other
// limiter's too.
type ExactKey struct {
	// Base is every key's name up to the window's start.
	Base string
	// Expiry is how long a key is kept after each take, from the time
	// of the take: at least the window (so that the key outlives it); 0
	// keeps it for the window.
	Expiry time.Duration
}

// MaxExactKey is the longest ExactKey.Base, in bytes.
const MaxExactKey = 8 << 10

// Name returns the key of the window holding now (ms since the epoch) for
// a rule of window w.
func (k ExactKey) Name(now int64, w time.Duration) string {
	sec := int64(w / time.Second)
	start := now / 1000 / sec * sec
	return k.Base + strconv.FormatInt(start, 10)
}

// Check reports whether k can name rule's keys: a FixedWindow rule of
// whole seconds, a Base of at most MaxExactKey bytes. The error wraps
// algorithms.ErrInvalidRequest.
func (k ExactKey) Check(rule algorithms.Rule) error {
	switch {
	case k.Base == "":
		return nil
	case !rule.PerWindow(): // a key per aligned window: FixedWindow
		return fmt.Errorf("%w: an exact key names fixed windows only, not %s", algorithms.ErrInvalidRequest, rule.Algorithm)
	case rule.Window%time.Second != 0:
		return fmt.Errorf("%w: an exact key needs a window of whole seconds, not %v", algorithms.ErrInvalidRequest, rule.Window)
	case len(k.Base) > MaxExactKey:
		return fmt.Errorf("%w: exact key of %d bytes; at most %d", algorithms.ErrInvalidRequest, len(k.Base), MaxExactKey)
	case k.Expiry != 0 && k.Expiry < rule.Window:
		return fmt.Errorf("%w: exact key expiry %v is shorter than the window %v", algorithms.ErrInvalidRequest, k.Expiry, rule.Window)
	}
	return nil
}

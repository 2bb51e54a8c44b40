package limiter

import (
	"encoding/json"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/limiter/internal/policydecode"
)

// DefaultPrefix is the key prefix of a Config that sets none.
const DefaultPrefix = "limitkit:"

// Config describes one limit. In JSON, windows are duration strings:
//
//	{"algorithm": "sliding_log", "limit": 100, "window": "1m", "prefix": "pay:",
//	 "on_failure": "fail_closed",
//	 "guard": {"limit": 1000, "window": "24h", "on_failure": "fail_closed"}}
type Config struct {
	// Algorithm is "sliding_log" (default), "compact_log", "two_level",
	// "sliding_counter", "gcra", "fixed_window" or "concurrency" (see the
	// package doc). A concurrency limit is used through Acquire, not
	// Allow.
	Algorithm algorithms.Name
	// Limit is the number of units admitted per Window (for
	// "concurrency": held at once). Required, 1 to 2^53 (10,000 for
	// sliding_log and concurrency).
	Limit int64
	// Window is the period of the limit (for "concurrency": the lease
	// timeout, after which a lease not released or renewed frees its
	// slots). Required, a whole number of milliseconds up to 366 days.
	Window time.Duration
	// Prefix namespaces this limit's keys in the store; give each limit
	// sharing a store its own. Default DefaultPrefix. It must not contain
	// '{' or '}'.
	Prefix string
	// OnFailure is how requests are decided while a fallback store's
	// primary (Redis) is unavailable: "local", "local:N", "fail_open" or
	// "fail_closed" (see package fallback). Default: the fallback store's
	// own policy. Stores other than fallback ignore it.
	OnFailure backend.FailurePolicy
	// Mode is Enforce (default) or Shadow: a shadow limit decides and
	// counts every request as if enforced but never denies one; the
	// Decision says when it would have (ShadowDenied). The guard has its
	// own Mode.
	Mode Mode
	// Guard, when set, is a second, independent limit on the same keys,
	// such as 1,000 a day on top of 100 a minute. A request is admitted
	// only when both admit; a denial by either consumes nothing from the
	// other. Default: none.
	Guard *Guard
	// Exempt lists keys that are never limited: Allow admits them with
	// Decision.Exempt set and no store call. Each entry is an exact key
	// or an address ("192.0.2.7") or CIDR prefix ("10.0.0.0/8",
	// "2001:db8::/32"), read strictly: no white space around it, no IPv6
	// zone, no host bits set. Address entries match client addresses
	// only: the key itself for Allow (IPv4-mapped keys match IPv4 entries,
	// a network key "2001:db8:1:2::/64" an entry that holds all of it), and
	// for Admit only Request.Client, never a key a client wrote. Default:
	// none.
	Exempt []string
	// Deny lists keys that are always denied, without a store call:
	// Decision.DenyListed is set and RetryAfter is 0, and Wait returns
	// ErrDenyListed at once. A deny entry wins over an exemption. In
	// Shadow mode a deny-listed key is admitted with ShadowDenied set.
	// Entries are written as Exempt's. Default: none.
	Deny []string
	// ReservationTimeout is how long a Reservation (ReserveN) may wait
	// for its Settle: one not settled by then (a crashed holder, an
	// aborted stream) ends counting its estimate, and a later Settle is
	// refused. Default DefaultReservationTimeout (10 minutes); at most 366
	// days. In JSON, "reservation_timeout": "10m".
	ReservationTimeout time.Duration
}

// Guard is a limiter's secondary limit, kept apart from the main one (its
// keys are the limiter's prefix + "guard:" with the same ids). On financial
// endpoints it bounds what a Redis failover that lost the main limit's
// latest writes can let through.
//
// By default the guard lives in the limiter's store, and on Redis in the
// same hash slot as its main key, decided by one script: losing that
// node's data loses both. Store puts the guard on a store of its own (a
// second Redis) that survives the loss of the main store's data.
type Guard struct {
	// Algorithm is "fixed_window" (default), "sliding_counter" or
	// "sliding_log".
	Algorithm algorithms.Name
	// Limit is the number of units admitted per Window. Required.
	Limit int64
	// Window is the period of the limit. Required.
	Window time.Duration
	// OnFailure is the guard's own failure policy (see
	// Config.OnFailure); a payment guard can fail closed while the main
	// limit goes local. Default: the fallback store's own policy.
	OnFailure backend.FailurePolicy
	// Mode is the guard's own Enforce (default) or Shadow mode.
	Mode Mode
	// Store, when set, keeps the guard's counts there instead of in the
	// limiter's store, such as a second Redis. A request then costs three
	// calls instead of one: the guard is peeked, the main limit taken, and
	// then the guard taken. A denial by either still consumes nothing
	// from the other, except when the guard denies between its peek and
	// its take (another caller took its last units): the main limit keeps
	// that unit until its window ends; never more than either limit is
	// admitted. Not written in JSON. Default nil: the limiter's store.
	Store backend.Store
}

// GuardRule is the Decision.Rule of a denial by a limiter's guard (0 is the
// main limit).
const GuardRule = 1

// maxReservationTimeout is the longest ReservationTimeout.
const maxReservationTimeout = 366 * 24 * time.Hour

// guardPrefix follows the limiter's prefix in its guard's keys.
const guardPrefix = "guard:"

// Mode says whether a limit's denials are enforced.
type Mode string

// The modes of a limit.
const (
	// Enforce denies what the limit denies. The default ("" means it).
	Enforce Mode = "enforce"
	// Shadow (a dry run) decides and counts every request exactly as
	// Enforce would, so its counts are those the enforced limit would
	// keep, but admits the requests it would deny and says so in
	// Decision.ShadowDenied. Use it to try a new limit on live traffic.
	Shadow Mode = "shadow"
)

func (m Mode) validate(field string) error {
	switch m {
	case "", Enforce, Shadow:
		return nil
	}
	s := string(m)
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return invalidf(ErrInvalidConfig, "%s %q: write %q or %q", field, s, Enforce, Shadow)
}

// withDefaults returns c with its empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Algorithm == "" {
		c.Algorithm = algorithms.SlidingLog
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.ReservationTimeout == 0 {
		c.ReservationTimeout = DefaultReservationTimeout
	}
	if c.Guard != nil {
		g := *c.Guard
		if g.Algorithm == "" {
			g.Algorithm = algorithms.FixedWindow
		}
		c.Guard = &g
	}
	return c
}

// Validate reports whether New would accept c, and if not, what to change.
func (c Config) Validate() error {
	_, _, err := c.checked()
	return err
}

// checked returns c with its defaults and its lists parsed, or an error
// wrapping ErrInvalidConfig that says what to change. It is the one check
// of a Config: what it accepts, the compiled engine trusts (engine.go).
func (c Config) checked() (Config, *lists, error) {
	c = c.withDefaults()
	if err := c.rule().Validate(); err != nil {
		return c, nil, restate(ErrInvalidConfig, err)
	}
	if err := c.Mode.validate("mode"); err != nil {
		return c, nil, err
	}
	if t := c.ReservationTimeout; t < 0 || t > maxReservationTimeout {
		return c, nil, invalidf(ErrInvalidConfig, "reservation_timeout %v: give a duration above 0 and up to 366 days (or none: %v)", t, DefaultReservationTimeout)
	}
	if err := (backend.Key{Prefix: c.Prefix, ID: "-"}).Validate(); err != nil {
		return c, nil, restate(ErrInvalidConfig, err)
	}
	if g := c.Guard; g != nil {
		if err := g.rule().Validate(); err != nil {
			return c, nil, within(restate(ErrInvalidConfig, err), "guard")
		}
		if g.rule().HoldsLeases() {
			return c, nil, invalidf(ErrInvalidConfig,
				"guard algorithm %q: a guard is a rate limit; make the concurrency limit the main one (guarded by a rate limit), or use a Composite", g.Algorithm)
		}
		if err := g.Mode.validate("guard.mode"); err != nil {
			return c, nil, err
		}
	}
	ls, err := parseLists(c.Exempt, c.Deny)
	return c, ls, err
}

func (c Config) rule() algorithms.Rule {
	return algorithms.Rule{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window}
}

func (g *Guard) rule() algorithms.Rule {
	return algorithms.Rule{Algorithm: g.Algorithm, Limit: g.Limit, Window: g.Window}
}

// ruleJSON is the part of Config and Guard written the same way in JSON.
// It serves MarshalJSON; reading goes through decodeConfig below.
type ruleJSON struct {
	Algorithm algorithms.Name       `json:"algorithm,omitempty"`
	Limit     int64                 `json:"limit"`
	Window    string                `json:"window"`
	OnFailure backend.FailurePolicy `json:"on_failure,omitzero"`
	Mode      Mode                  `json:"mode,omitempty"`
}

// configJSON is Config as written in JSON.
type configJSON struct {
	ruleJSON
	Prefix string     `json:"prefix,omitempty"`
	Guard  *guardJSON `json:"guard,omitempty"`
	Exempt []string   `json:"exempt,omitempty"`
	Deny   []string   `json:"deny,omitempty"`
	// ReservationTimeout is written only when set.
	ReservationTimeout string `json:"reservation_timeout,omitempty"`
}

type guardJSON struct{ ruleJSON }

func toRuleJSON(alg algorithms.Name, limit int64, window time.Duration, onFailure backend.FailurePolicy, mode Mode) ruleJSON {
	return ruleJSON{Algorithm: alg, Limit: limit, Window: window.String(), OnFailure: onFailure, Mode: mode}
}

// MarshalJSON writes a Config with windows as duration strings.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{ruleJSON: toRuleJSON(c.Algorithm, c.Limit, c.Window, c.OnFailure, c.Mode), Prefix: c.Prefix,
		Exempt: c.Exempt, Deny: c.Deny}
	if c.ReservationTimeout != 0 {
		j.ReservationTimeout = c.ReservationTimeout.String()
	}
	if g := c.Guard; g != nil {
		j.Guard = &guardJSON{toRuleJSON(g.Algorithm, g.Limit, g.Window, g.OnFailure, g.Mode)}
	}
	return json.Marshal(j)
}

// The one list of Config's fields as they are written in JSON and in
// limiter/config's files: decodeConfig below, registered with package
// policydecode so that limiter/config decodes its policies through it too.
const (
	ruleFields   = "algorithm, limit, window, on_failure, mode"
	configFields = "algorithm, limit, window, prefix, on_failure, mode, guard, exempt, deny, reservation_timeout"
)

func init() {
	policydecode.Config = func(d configtree.Decoder, n *configtree.Node, path string) (any, error) {
		return decodeConfig(d, n, path)
	}
}

// UnmarshalJSON reads a Config, with windows as duration strings such as
// "1m" or "500ms". Unknown and repeated fields are errors, so that typos do
// not pass silently. The checks and messages are those of limiter/config's
// files.
func (c *Config) UnmarshalJSON(data []byte) error {
	root, err := configtree.ParseJSON(data)
	if err == nil {
		var cfg Config
		if cfg, err = decodeConfig(configtree.Decoder{}, root, ""); err == nil {
			*c = cfg
			return nil
		}
	}
	return restate(ErrInvalidConfig, err)
}

// decodeConfig reads the mapping n at path.
func decodeConfig(d configtree.Decoder, n *configtree.Node, path string) (Config, error) {
	var c Config
	err := d.Each(n, path, func(f configtree.Pair, p string) error {
		ok, err := decodeRule(d, f, p, &c.Algorithm, &c.Limit, &c.Window, &c.OnFailure, &c.Mode)
		if !ok {
			switch f.Key {
			case "prefix":
				c.Prefix, err = d.Str(f.Val, p)
			case "guard":
				g := &Guard{}
				err = d.Each(f.Val, p, func(f configtree.Pair, p string) error {
					ok, err := decodeRule(d, f, p, &g.Algorithm, &g.Limit, &g.Window, &g.OnFailure, &g.Mode)
					if !ok {
						err = d.Unknown(f, configtree.Join(path, "guard"), ruleFields)
					}
					return err
				})
				c.Guard = g
			case "exempt":
				c.Exempt, err = d.Strings(f.Val, p)
			case "deny":
				c.Deny, err = d.Strings(f.Val, p)
			case "reservation_timeout":
				c.ReservationTimeout, err = d.Duration(f.Val, p)
			default:
				err = d.Unknown(f, path, configFields)
			}
		}
		return err
	})
	return c, err
}

// decodeRule decodes f into the fields a limit and its guard share when it
// is one of them, and reports whether it was.
func decodeRule(d configtree.Decoder, f configtree.Pair, p string, alg *algorithms.Name, limit *int64, window *time.Duration, onFailure *backend.FailurePolicy, mode *Mode) (bool, error) {
	var err error
	switch f.Key {
	case "algorithm":
		var s string
		s, err = d.Str(f.Val, p)
		*alg = algorithms.Name(s)
	case "limit":
		*limit, err = d.Int64(f.Val, p)
	case "window":
		*window, err = d.Duration(f.Val, p)
	case "on_failure":
		*onFailure, err = policydecode.FailurePolicy(d, f.Val, p)
	case "mode":
		var s string
		s, err = d.Str(f.Val, p)
		*mode = Mode(s)
	default:
		return false, nil
	}
	return true, err
}

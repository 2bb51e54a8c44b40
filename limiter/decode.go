package limiter

import (
	"fmt"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter/internal/settings"
)

// The one list of Config's fields as they are written in JSON and in
// limiter/config's files: decodeConfig below, registered with package
// settings so that limiter/config decodes its policies through it too.
const (
	ruleFields   = "algorithm, limit, window, on_failure, mode"
	configFields = "algorithm, limit, window, prefix, on_failure, mode, guard"
)

func init() {
	settings.Limit = func(d settings.Decoder, n *settings.Node, path string) (any, error) {
		return decodeConfig(d, n, path)
	}
}

// UnmarshalJSON reads a Config, with windows as duration strings such as
// "1m" or "500ms". Unknown and repeated fields are errors, so that typos do
// not pass silently. The checks and messages are those of limiter/config's
// files.
func (c *Config) UnmarshalJSON(data []byte) error {
	root, err := settings.ParseJSON(data)
	if err == nil {
		var cfg Config
		if cfg, err = decodeConfig(settings.Decoder{}, root, ""); err == nil {
			*c = cfg
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
}

// decodeConfig reads the mapping n at path.
func decodeConfig(d settings.Decoder, n *settings.Node, path string) (Config, error) {
	var c Config
	err := d.Each(n, path, func(f settings.Pair, p string) error {
		ok, err := decodeRule(d, f, p, &c.Algorithm, &c.Limit, &c.Window, &c.OnFailure, &c.Mode)
		if !ok {
			switch f.Key {
			case "prefix":
				c.Prefix, err = d.Str(f.Val, p)
			case "guard":
				g := &Guard{}
				err = d.Each(f.Val, p, func(f settings.Pair, p string) error {
					ok, err := decodeRule(d, f, p, &g.Algorithm, &g.Limit, &g.Window, &g.OnFailure, &g.Mode)
					if !ok {
						err = d.Unknown(f, settings.Join(path, "guard"), ruleFields)
					}
					return err
				})
				c.Guard = g
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
func decodeRule(d settings.Decoder, f settings.Pair, p string, alg *algorithms.Name, limit *int64, window *time.Duration, onFailure *backend.FailurePolicy, mode *Mode) (bool, error) {
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
		*onFailure, err = d.FailurePolicy(f.Val, p)
	case "mode":
		var s string
		s, err = d.Str(f.Val, p)
		*mode = Mode(s)
	default:
		return false, nil
	}
	return true, err
}

package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter"
)

// Validate reports whether Build would accept c, and if not, what to change
// and where: an *Error naming the field (and, for a parsed file, the line).
// It does not contact any server.
func (c *Config) Validate() error {
	if err := c.validateBackend(); err != nil {
		return err
	}
	if len(c.Policies) == 0 {
		return c.fieldError("policies", errors.New("no policies; declare at least one"))
	}
	owners := map[string]string{} // prefix -> field that claims it
	for i := range c.Policies {
		p := &c.Policies[i]
		path := "policies." + p.Name
		if err := validName(p.Name); err != nil {
			return c.fieldError(path, err)
		}
		for _, q := range c.Policies[:i] {
			if q.Name == p.Name {
				return c.fieldError(path, errors.New("declared twice"))
			}
		}
		if err := c.validatePolicy(path, p.Name, p.Config); err != nil {
			return err
		}
		prefix := policyPrefix(p.Name, p.Config)
		claims := []string{prefix}
		if p.Config.Guard != nil {
			claims = append(claims, prefix+"guard:")
		}
		for _, pre := range claims {
			if other, ok := owners[pre]; ok {
				return c.fieldError(path+".prefix", fmt.Errorf("the keys under %q are already %s's; give each policy its own prefix", pre, other))
			}
			owners[pre] = path
		}
	}
	return nil
}

// policyPrefix is the prefix a policy's limiter uses.
func policyPrefix(name string, cfg limiter.Config) string {
	if cfg.Prefix != "" {
		return cfg.Prefix
	}
	return limiter.DefaultPrefix + name + ":"
}

// validName accepts the policy names whose default prefix is a valid one.
func validName(name string) error {
	if name == "" {
		return errors.New("a policy needs a name")
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/", r)
		if !ok {
			return fmt.Errorf("name %q: use letters, digits and \"_-.:/\" only", name)
		}
	}
	return nil
}

// validatePolicy checks each field on its own, so that the error names the
// field at fault, then the whole.
func (c *Config) validatePolicy(path, name string, cfg limiter.Config) error {
	alg := cfg.Algorithm
	if alg == "" {
		alg = algorithms.SlidingLog
	}
	if err := c.validateRule(path, alg, cfg.Limit, cfg.Window); err != nil {
		return err
	}
	if err := validMode(cfg.Mode); err != nil {
		return c.fieldError(path+".mode", err)
	}
	if err := (backend.Key{Prefix: policyPrefix(name, cfg), ID: "-"}).Validate(); err != nil {
		return c.fieldError(path+".prefix", fmt.Errorf("%w: prefix %q contains '{' or '}'; remove them", limiter.ErrInvalidConfig, cfg.Prefix))
	}
	if g := cfg.Guard; g != nil {
		galg := g.Algorithm
		if galg == "" {
			galg = algorithms.FixedWindow
		}
		if err := c.validateRule(path+".guard", galg, g.Limit, g.Window); err != nil {
			return err
		}
		if err := validMode(g.Mode); err != nil {
			return c.fieldError(path+".guard.mode", err)
		}
	}
	cfg.Prefix = policyPrefix(name, cfg)
	if err := cfg.Validate(); err != nil {
		return c.fieldError(path, err)
	}
	return nil
}

// validateRule checks the algorithm, then the limit, then the window.
func (c *Config) validateRule(path string, alg algorithms.Name, limit int64, window time.Duration) error {
	if !slices.Contains(algorithms.Names(), alg) {
		return c.fieldError(path+".algorithm", fmt.Errorf("%w: unknown algorithm %q; choose one of %q",
			limiter.ErrInvalidConfig, string(alg), algorithms.Names()))
	}
	if limit == 0 && c.lines[path+".limit"] == 0 {
		return c.fieldError(path+".limit", fmt.Errorf("%w: missing; write the number of requests admitted per window", limiter.ErrInvalidConfig))
	}
	if err := (algorithms.Rule{Algorithm: alg, Limit: limit, Window: time.Second}).Validate(); err != nil {
		return c.fieldError(path+".limit", err)
	}
	if window == 0 && c.lines[path+".window"] == 0 {
		return c.fieldError(path+".window", fmt.Errorf("%w: missing; write the period of the limit, such as \"1m\"", limiter.ErrInvalidConfig))
	}
	if err := (algorithms.Rule{Algorithm: alg, Limit: 1, Window: window}).Validate(); err != nil {
		return c.fieldError(path+".window", err)
	}
	return nil
}

func (c *Config) validateBackend() error {
	b := &c.Backend
	switch b.Client {
	case "", GoRedis, Rueidis:
	default:
		return c.fieldError("backend.client", fmt.Errorf("unknown client %q; write %q or %q", b.Client, GoRedis, Rueidis))
	}
	if b.URL == "" {
		return c.fieldError("backend.url", errors.New("missing; write memory:// or redis://host:port/db"))
	}
	t, err := b.target()
	if err != nil {
		return c.fieldError("backend.url", err)
	}
	if t.kind == memoryKind {
		switch {
		case b.ServerTime:
			return c.fieldError("backend.server_time", errors.New("needs a Redis backend; memory:// always uses the limiter's clock"))
		case b.ReplicaAck != nil:
			return c.fieldError("backend.replica_ack", errors.New("needs a Redis backend; memory:// has no replicas"))
		case b.Batch != 0:
			return c.fieldError("backend.batch", errors.New("needs a Redis backend; memory:// sends nothing"))
		case b.Fallback != nil:
			return c.fieldError("backend.fallback", errors.New("wraps a Redis store; memory:// needs none"))
		}
	}
	if b.Batch < 0 {
		return c.fieldError("backend.batch", fmt.Errorf("is %d; it must be at least 1 (1 sends each Take alone)", b.Batch))
	}
	if a := b.ReplicaAck; a != nil {
		if t.kind == clusterKind {
			return c.fieldError("backend.replica_ack", errors.New("not available on Redis Cluster; use a single-master URL (redis:// or redis+sentinel://)"))
		}
		if a.Replicas < 1 {
			return c.fieldError("backend.replica_ack.replicas", fmt.Errorf("is %d; it must be at least 1", a.Replicas))
		}
		if a.Timeout <= 0 {
			return c.fieldError("backend.replica_ack.timeout", fmt.Errorf("is %v; it must be positive, such as \"50ms\"", a.Timeout))
		}
		switch a.OnShort {
		case "", "deny", "admit":
		default:
			return c.fieldError("backend.replica_ack.on_short", fmt.Errorf("%q: write \"deny\" or \"admit\"", a.OnShort))
		}
	}
	if f := b.Fallback; f != nil {
		for _, d := range []struct {
			field string
			v     time.Duration
		}{{"timeout", f.Timeout}, {"open_timeout", f.OpenTimeout}} {
			if d.v < 0 {
				return c.fieldError("backend.fallback."+d.field, fmt.Errorf("is %v; it must be positive (or absent for the default)", d.v))
			}
		}
		for _, n := range []struct {
			field string
			v     int
		}{{"failure_threshold", f.FailureThreshold}, {"probes", f.Probes}} {
			if n.v < 0 {
				return c.fieldError("backend.fallback."+n.field, fmt.Errorf("is %d; it must be at least 1 (or absent for the default)", n.v))
			}
		}
	}
	return nil
}

// fieldLine finds the line of field or, failing that, of its closest
// parent the file gave.
func (c *Config) fieldLine(field string) int {
	for f := field; f != ""; {
		if l, ok := c.lines[f]; ok {
			return l
		}
		i := strings.LastIndexByte(f, '.')
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/internal/suggest"
	"github.com/limitkit/limitkit/limiter"
)

// Validate reports whether Build would accept c, and if not, what to change
// and where: an *Error naming the field (and, for a parsed file, the line),
// or an *Errors listing every problem when there are several. It does not
// contact any server.
func (c *Config) Validate() error {
	l := &errorList{}
	c.validate(l)
	return l.err()
}

// validate adds c's problems to l, skipping fields l has problems with.
func (c *Config) validate(l *errorList) {
	c.validateBackend(l)
	if len(c.Policies) == 0 {
		l.add(c.fieldError("policies", errors.New("no policies; declare at least one")))
		return
	}
	owners := map[string]string{} // prefix -> field that claims it
	for i := range c.Policies {
		p := &c.Policies[i]
		path := "policies." + p.Name
		if err := validName(p.Name); err != nil {
			l.add(c.fieldError(path, err))
			continue
		}
		if slices.ContainsFunc(c.Policies[:i], func(q Policy) bool { return q.Name == p.Name }) {
			l.add(c.fieldError(path, errors.New("declared twice")))
			continue
		}
		c.validatePolicy(l, path, p.Name, p.Config)
		c.validateHTTP(l, path, p.HTTP)
		prefix := policyPrefix(p.Name, p.Config)
		claims := []string{prefix}
		if p.Config.Guard != nil {
			claims = append(claims, prefix+"guard:")
		}
		for _, pre := range claims {
			if other, ok := owners[pre]; ok {
				l.add(c.fieldError(path+".prefix", fmt.Errorf("the keys under %q are already %s's; give each policy its own prefix", pre, other)))
				break
			}
			owners[pre] = path
		}
	}
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

// validatePolicy checks each field on its own, so that each error names
// the field at fault, then, if they passed, the whole.
func (c *Config) validatePolicy(l *errorList, path, name string, cfg limiter.Config) {
	before := len(l.errs)
	alg := cfg.Algorithm
	if alg == "" {
		alg = algorithms.SlidingLog
	}
	c.validateRule(l, path, alg, cfg.Limit, cfg.Window)
	if err := validMode(cfg.Mode); err != nil {
		l.add(c.fieldError(path+".mode", err))
	}
	if err := (backend.Key{Prefix: policyPrefix(name, cfg), ID: "-"}).Validate(); err != nil {
		l.add(c.fieldError(path+".prefix", fmt.Errorf("%w: prefix %q contains '{' or '}'; remove them", limiter.ErrInvalidConfig, clip(cfg.Prefix, 64))))
	}
	if g := cfg.Guard; g != nil {
		galg := g.Algorithm
		if galg == "" {
			galg = algorithms.FixedWindow
		}
		c.validateRule(l, path+".guard", galg, g.Limit, g.Window)
		if err := validMode(g.Mode); err != nil {
			l.add(c.fieldError(path+".guard.mode", err))
		}
	}
	c.validateList(l, path+".exempt", cfg.Exempt, func(e string) limiter.Config { return limiter.Config{Exempt: []string{e}} })
	c.validateList(l, path+".deny", cfg.Deny, func(e string) limiter.Config { return limiter.Config{Deny: []string{e}} })
	if len(l.errs) > before || l.has(path) {
		return
	}
	cfg.Prefix = policyPrefix(name, cfg)
	if err := cfg.Validate(); err != nil {
		l.add(c.fieldError(path, err))
	}
}

// validateList checks each exempt or deny entry on its own, so that the
// error has the entry's line: probe makes a valid limit holding only it.
func (c *Config) validateList(l *errorList, path string, entries []string, probe func(string) limiter.Config) {
	for i, e := range entries {
		cfg := probe(e)
		cfg.Limit, cfg.Window = 1, time.Second
		if err := cfg.Validate(); err != nil {
			l.add(c.fieldError(path+"."+strconv.Itoa(i), err))
		}
	}
}

// validateRule checks the algorithm, the limit and the window. The limit's
// bound is checked with the rule's own window: gcra's depends on it.
func (c *Config) validateRule(l *errorList, path string, alg algorithms.Name, limit int64, window time.Duration) {
	names := algorithms.Names()
	algOK := slices.Contains(names, alg)
	if !algOK {
		l.add(c.fieldError(path+".algorithm", fmt.Errorf("%w: unknown algorithm %q%s; choose one of %q",
			limiter.ErrInvalidConfig, clip(string(alg), 40), suggest.DidYouMean(string(alg), nameStrings(names)), names)))
	}
	windowOK := false
	switch {
	case window == 0 && c.lines[path+".window"] == 0 && c.typos[path+".window"]:
	case window == 0 && c.lines[path+".window"] == 0:
		l.add(c.fieldError(path+".window", fmt.Errorf("%w: missing; write the period of the limit, such as \"1m\"", limiter.ErrInvalidConfig)))
	case !algOK:
	default:
		if err := (algorithms.Rule{Algorithm: alg, Limit: 1, Window: window}).Validate(); err != nil {
			l.add(c.fieldError(path+".window", err))
		} else {
			windowOK = true
		}
	}
	switch {
	case limit == 0 && c.lines[path+".limit"] == 0 && c.typos[path+".limit"]:
	case limit == 0 && c.lines[path+".limit"] == 0:
		l.add(c.fieldError(path+".limit", fmt.Errorf("%w: missing; write the number of requests admitted per window", limiter.ErrInvalidConfig)))
	case !algOK:
	default:
		w := window
		if !windowOK {
			// Check what does not depend on the window.
			w = algorithms.MinWindow
		}
		if err := (algorithms.Rule{Algorithm: alg, Limit: limit, Window: w}).Validate(); err != nil {
			l.add(c.fieldError(path+".limit", err))
		}
	}
}

func nameStrings(names []algorithms.Name) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return out
}

func (c *Config) validateBackend(l *errorList) {
	b := &c.Backend
	switch b.Client {
	case "", GoRedis, Rueidis:
	default:
		l.add(c.fieldError("backend.client", fmt.Errorf("unknown client %q%s; write %q or %q",
			clip(b.Client, 40), suggest.DidYouMean(b.Client, []string{GoRedis, Rueidis}), GoRedis, Rueidis)))
	}
	kind := storeurl.Single
	if b.URL == "" {
		l.add(c.fieldError("backend.url", errors.New("missing; write memory:// or redis://host:port/db")))
	} else if k, err := b.kind(); err != nil {
		if !l.has("backend.client") {
			l.add(c.fieldError("backend.url", err))
		}
	} else {
		kind = k
	}
	if kind == storeurl.Memory {
		c.validateMemoryBackend(l)
	}
	if b.Batch < 0 {
		l.add(c.fieldError("backend.batch", fmt.Errorf("is %d; it must be at least 1 (1 sends each Take alone)", b.Batch)))
	}
	if b.ReplicaAck != nil && kind != storeurl.Memory {
		c.validateReplicaAck(l, kind)
	}
	c.validateDenyCache(l)
	c.validateFallback(l)
}

// validateMemoryBackend refuses the settings only a Redis backend reads.
func (c *Config) validateMemoryBackend(l *errorList) {
	b := &c.Backend
	if b.ServerTime {
		l.add(c.fieldError("backend.server_time", errors.New("needs a Redis backend; memory:// always uses the limiter's clock")))
	}
	if b.ReplicaAck != nil {
		l.add(c.fieldError("backend.replica_ack", errors.New("needs a Redis backend; memory:// has no replicas")))
	}
	if b.Batch != 0 {
		l.add(c.fieldError("backend.batch", errors.New("needs a Redis backend; memory:// sends nothing")))
	}
	if b.Fallback != nil {
		l.add(c.fieldError("backend.fallback", errors.New("wraps a Redis store; memory:// needs none")))
	}
}

// validateReplicaAck checks backend.replica_ack on a Redis backend of kind.
func (c *Config) validateReplicaAck(l *errorList, kind storeurl.Kind) {
	a := c.Backend.ReplicaAck
	if kind == storeurl.Cluster {
		l.add(c.fieldError("backend.replica_ack", errors.New("not available on Redis Cluster; use a single-master URL (redis:// or redis+sentinel://)")))
	}
	if a.Replicas < 1 {
		l.add(c.fieldError("backend.replica_ack.replicas", fmt.Errorf("is %d; it must be at least 1", a.Replicas)))
	}
	if a.Timeout <= 0 {
		l.add(c.fieldError("backend.replica_ack.timeout", fmt.Errorf("is %v; it must be positive, such as \"50ms\"", a.Timeout)))
	}
	switch a.OnShort {
	case "", "deny", "admit":
	default:
		l.add(c.fieldError("backend.replica_ack.on_short", fmt.Errorf("%q%s: write \"deny\" or \"admit\"",
			clip(a.OnShort, 40), suggest.DidYouMean(a.OnShort, []string{"deny", "admit"}))))
	}
}

// validateDenyCache checks backend.deny_cache.
func (c *Config) validateDenyCache(l *errorList) {
	d := c.Backend.DenyCache
	if d == nil {
		return
	}
	if d.MaxEntries < 0 || d.MaxEntries > 0 && d.MaxEntries < 64 {
		l.add(c.fieldError("backend.deny_cache.max_entries", fmt.Errorf("is %d; it must be at least 64 (or absent for the default %d)",
			d.MaxEntries, denycache.DefaultMaxEntries)))
	}
	if d.ProbeInterval < 0 || d.ProbeInterval > 0 && d.ProbeInterval < time.Millisecond {
		l.add(c.fieldError("backend.deny_cache.probe_interval", fmt.Errorf("is %v; it must be at least 1ms (or absent for the default %v)",
			d.ProbeInterval, denycache.DefaultProbeInterval)))
	}
}

// validateFallback checks backend.fallback.
func (c *Config) validateFallback(l *errorList) {
	f := c.Backend.Fallback
	if f == nil {
		return
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"timeout", f.Timeout}, {"open_timeout", f.OpenTimeout}} {
		if d.v < 0 {
			l.add(c.fieldError("backend.fallback."+d.field, fmt.Errorf("is %v; it must be positive (or absent for the default)", d.v)))
		}
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"failure_threshold", f.FailureThreshold}, {"probes", f.Probes}} {
		if n.v < 0 {
			l.add(c.fieldError("backend.fallback."+n.field, fmt.Errorf("is %d; it must be at least 1 (or absent for the default)", n.v)))
		}
	}
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

package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/limitkit/limitkit/limiter"
)

// validMode accepts the values of a policy's (or guard's) mode.
func validMode(m limiter.Mode) error {
	switch m {
	case "", limiter.Enforce, limiter.Shadow:
		return nil
	}
	return fmt.Errorf("%q: write %q (the default) or %q", clip(string(m), 32), limiter.Enforce, limiter.Shadow)
}

// limiterConfigs returns the policies' configurations, prefixes filled in,
// in file order.
func (c *Config) limiterConfigs() []limiter.Config {
	cfgs := make([]limiter.Config, len(c.Policies))
	for i, p := range c.Policies {
		cfgs[i] = p.Config
		cfgs[i].Prefix = policyPrefix(p.Name, p.Config)
	}
	return cfgs
}

// ReloadFile reads the file at path (see Load) and applies it with Reload.
// A file that does not load (a syntax error, an invalid limit) changes
// nothing, and the error reports every problem Load found.
//
// Replace the file atomically: write the new version beside it and rename
// it into place (mv, os.Rename; what Kubernetes does for a mounted
// ConfigMap), so that a reader sees the old file or the new one, never
// half of one. A file cut short can still parse (a limit of 1000 written
// as far as "10"), so ReloadFile also waits for the file to settle: it
// reads it again after SettleInterval and applies it only when both reads
// are the same, trying up to MaxSettleReads times before it gives up with
// an error, changing nothing. That catches a writer still writing, not
// one that stopped half way: only the rename is safe from that.
//
//	// on SIGHUP:
//	if err := set.ReloadFile("limits.yaml"); err != nil {
//		log.Printf("limits not reloaded, the old ones stay: %v", err)
//	}
func (s *Set) ReloadFile(path string) error {
	data, err := readSettled(path)
	if err != nil {
		return err
	}
	next, err := parse(data, formatOf(path), path)
	if err != nil {
		return err
	}
	return s.Reload(next)
}

// SettleInterval is how long ReloadFile waits between two reads of a file
// for it to be the same; MaxSettleReads bounds the reads.
const (
	SettleInterval = 50 * time.Millisecond
	MaxSettleReads = 20
)

// settle waits between two reads; a test replaces it to write meanwhile.
var settle = func() { time.Sleep(SettleInterval) }

// readSettled reads path until two reads in a row, SettleInterval apart,
// are equal.
func readSettled(path string) ([]byte, error) {
	prev, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for range MaxSettleReads - 1 {
		settle()
		cur, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if bytes.Equal(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return nil, &Error{File: path, Err: fmt.Errorf("the file kept changing over %d reads %v apart; nothing was reloaded: "+
		"write the new file beside it and rename it into place", MaxSettleReads, SettleInterval)}
}

// Reload changes the limits of the set's policies to next's while they
// serve requests. next is validated first; when it is invalid, or changes
// what a reload cannot, nothing changes and the error says why. Otherwise
// every policy's configuration is swapped in one atomic step (see
// limiter.Group.SetConfigs): no request sees some policies changed and
// others not. Counts are kept as limiter.Limiter.SetConfig describes.
//
// A reload can change any field of any policy's limit (limit, window,
// algorithm, mode, guard, prefix, on_failure, exempt, deny). It cannot
// change the backend section (the store is open), add, remove or rename
// policies (the limiters are in the program's hands), or change a
// policy's http block (the middleware Set.HTTP built keeps its key and
// headers; it follows the new limit): restart for those.
func (s *Set) Reload(next *Config) error {
	if next == nil {
		return errors.New("config: reload: the new configuration is nil")
	}
	if err := next.Validate(); err != nil {
		return err
	}
	if !reflect.DeepEqual(next.Backend, s.backend) {
		return next.fieldError("backend", fmt.Errorf("%w: changed; a reload changes policies only, restart to change the backend", limiter.ErrInvalidConfig))
	}
	cfgs := next.limiterConfigs()
	byName := make(map[string]limiter.Config, len(cfgs))
	for i, p := range next.Policies {
		byName[p.Name] = cfgs[i]
	}
	var added, removed []string
	for _, p := range next.Policies {
		if _, ok := s.limiters[p.Name]; !ok {
			added = append(added, p.Name)
		}
	}
	ordered := make([]limiter.Config, 0, len(s.names))
	for _, name := range s.names {
		cfg, ok := byName[name]
		if !ok {
			removed = append(removed, name)
		}
		ordered = append(ordered, cfg)
	}
	if len(added) > 0 || len(removed) > 0 {
		var what []string
		if len(added) > 0 {
			what = append(what, "adds "+strings.Join(added, ", "))
		}
		if len(removed) > 0 {
			what = append(what, "removes "+strings.Join(removed, ", "))
		}
		return next.fieldError("policies", fmt.Errorf("%w: the new file %s; a reload changes existing policies only, restart to add or remove one",
			limiter.ErrInvalidConfig, strings.Join(what, " and ")))
	}
	if err := s.checkHTTPUnchanged(next); err != nil {
		return err
	}
	if err := s.group.SetConfigs(ordered); err != nil {
		return next.fieldError("policies", err)
	}
	return nil
}

// Plans returns a limiter.Plans whose plans are the named policies, chosen
// per request by resolve: the names the resolver returns are policy names.
// Each policy keeps its own prefix, so counts stay per key and plan, and a
// Reload changes the plans' limits with the rest.
//
//	plans, err := set.Plans(func(ctx context.Context, apiKey string) (string, error) {
//		return tierOf(apiKey), nil // "free" or "pro", two policies of the file
//	}, "free", "pro")
func (s *Set) Plans(resolve limiter.Resolver, names ...string) (*limiter.Plans, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("config: %w: name the policies that are plans", limiter.ErrInvalidConfig)
	}
	m := make(map[string]*limiter.Limiter, len(names))
	for _, name := range names {
		l, ok := s.limiters[name]
		if !ok {
			return nil, fmt.Errorf("config: %w: plan %q is not a policy of the file; the policies are %q", limiter.ErrUnknownPlan, clip(name, 64), s.names)
		}
		m[name] = l
	}
	if len(m) != len(names) {
		return nil, fmt.Errorf("config: %w: a plan is named twice in %q", limiter.ErrInvalidConfig, slices.Clone(names))
	}
	return limiter.NewPlans(m, resolve)
}

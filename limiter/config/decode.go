package config

import (
	"errors"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/limiter/internal/policydecode"
)

// decoder walks a parsed file into a Config, recording each field's line
// and collecting every problem in l. Its checks and messages are
// configtree.Decoder's, the policies' fields limiter's (policydecode.Config),
// shared with limiter.Config's UnmarshalJSON.
type decoder struct {
	configtree.Decoder
	c *Config
}

func (c *Config) decode(root *configtree.Node, l *errorList) {
	d := decoder{configtree.Decoder{Lines: c.lines, Typos: c.typos, Report: func(err error) { l.add(fileError(err)) }}, c}
	seen := false
	err := d.Each(root, "", func(f configtree.Pair, p string) error {
		switch f.Key {
		case "backend":
			return d.backend(f.Val, p)
		case "policies":
			seen = true
			return d.policies(f.Val, p)
		case "adaptive":
			return d.adaptive(f.Val, p)
		}
		return d.Unknown(f, "", "backend, policies, adaptive")
	})
	if err != nil {
		l.add(fileError(err))
		return
	}
	if !seen {
		l.add(&Error{Field: "policies", Err: errors.New("missing; declare at least one policy")})
	}
}

// fileError turns a *configtree.Error into an *Error.
func fileError(err error) error {
	var se *configtree.Error
	if errors.As(err, &se) {
		return &Error{Line: se.Line, Field: se.Field, Err: se.Err}
	}
	return err
}

const backendFields = "url, client, server_time, replica_ack, batch, deny_cache, fallback"

func (d decoder) backend(n *configtree.Node, path string) error {
	b := &d.c.Backend
	return d.Each(n, path, func(f configtree.Pair, p string) (err error) {
		switch f.Key {
		case "url":
			b.URL, err = d.Str(f.Val, p)
		case "client":
			b.Client, err = d.Str(f.Val, p)
		case "server_time":
			b.ServerTime, err = d.Bool(f.Val, p)
		case "replica_ack":
			b.ReplicaAck, err = d.replicaAck(f.Val, p)
		case "batch":
			b.Batch, err = d.Int(f.Val, p)
		case "deny_cache":
			b.DenyCache, err = d.denyCache(f.Val, p)
		case "fallback":
			b.Fallback, err = d.fallback(f.Val, p)
		default:
			err = d.Unknown(f, path, backendFields)
		}
		return err
	})
}

func (d decoder) replicaAck(n *configtree.Node, path string) (*ReplicaAck, error) {
	a := &ReplicaAck{}
	return a, d.Each(n, path, func(f configtree.Pair, p string) (err error) {
		switch f.Key {
		case "replicas":
			a.Replicas, err = d.Int(f.Val, p)
		case "timeout":
			a.Timeout, err = d.Duration(f.Val, p)
		case "on_short":
			a.OnShort, err = d.Str(f.Val, p)
		default:
			err = d.Unknown(f, path, "replicas, timeout, on_short")
		}
		return err
	})
}

func (d decoder) denyCache(n *configtree.Node, path string) (*DenyCache, error) {
	dc := &DenyCache{}
	return dc, d.Each(n, path, func(f configtree.Pair, p string) (err error) {
		switch f.Key {
		case "max_entries":
			dc.MaxEntries, err = d.Int(f.Val, p)
		case "probe_interval":
			dc.ProbeInterval, err = d.Duration(f.Val, p)
		case "channel":
			dc.Channel, err = d.Str(f.Val, p)
		default:
			err = d.Unknown(f, path, "max_entries, probe_interval, channel")
		}
		return err
	})
}

func (d decoder) fallback(n *configtree.Node, path string) (*Fallback, error) {
	fb := &Fallback{}
	return fb, d.Each(n, path, func(f configtree.Pair, p string) (err error) {
		switch f.Key {
		case "timeout":
			fb.Timeout, err = d.Duration(f.Val, p)
		case "failure_threshold":
			fb.FailureThreshold, err = d.Int(f.Val, p)
		case "open_timeout":
			fb.OpenTimeout, err = d.Duration(f.Val, p)
		case "probes":
			fb.Probes, err = d.Int(f.Val, p)
		case "on_failure":
			fb.OnFailure, err = policydecode.FailurePolicy(d.Decoder, f.Val, p)
		default:
			err = d.Unknown(f, path, "timeout, failure_threshold, open_timeout, probes, on_failure")
		}
		return err
	})
}

func (d decoder) policies(n *configtree.Node, path string) error {
	return d.Each(n, path, func(f configtree.Pair, p string) error {
		v, block, err := d.policy(f.Val, p)
		if err != nil {
			return err
		}
		cfg := v.(limiter.Config)
		d.c.lines[p] = f.KeyLine
		if cfg.Prefix == "" && validName(f.Key) == nil {
			cfg.Prefix = policyPrefix(f.Key, cfg)
		}
		d.c.Policies = append(d.c.Policies, Policy{Name: f.Key, Config: cfg, HTTP: block})
		return nil
	})
}

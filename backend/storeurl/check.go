package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// checkScript is what Open runs on every node: a script, since an ACL user
// of the stores may run scripts but not PING, and read-only, so that a
// replica or a read-only user can answer it.
const checkScript = "return 1"

// checkGoRedis runs checkScript on every master a go-redis client knows,
// after dialling an address of the URL once itself: go-redis retries a
// failed dial in the background until the context ends and then reports
// only the deadline, while the dialler's own error says why (a TLS
// handshake with a plain server, a refused connection).
func checkGoRedis(ctx context.Context, t *target, c redis.UniversalClient) error {
	if err := predial(ctx, t); err != nil {
		return explain(err, t, nil)
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			if err := n.EvalRO(ctx, checkScript, nil).Err(); err != nil {
				return fmt.Errorf("%s: %w", n.Options().Addr, err)
			}
			return nil
		})
	} else {
		err = c.EvalRO(ctx, checkScript, nil).Err()
	}
	if err != nil {
		return explain(err, t, func() string { return sentinelProblem(ctx, t) })
	}
	return nil
}

// checkRueidis runs checkScript on every node a rueidis client knows (it
// connected to them in rueidis.NewClient).
func checkRueidis(ctx context.Context, t *target, c rueidis.Client) error {
	for addr, n := range c.Nodes() {
		if err := n.Do(ctx, n.B().EvalRo().Script(checkScript).Numkeys(0).Build()).Error(); err != nil {
			return explain(fmt.Errorf("%s: %w", addr, err), t, nil)
		}
	}
	return nil
}

// predial dials the go-redis target's addresses (the server, the cluster
// seeds, the sentinels) as the client would, until one answers, and
// returns the first error when none does.
func predial(ctx context.Context, t *target) error {
	var (
		addrs []string
		dial  func(context.Context, string, string) (net.Conn, error)
	)
	switch {
	case t.single != nil:
		addrs, dial = []string{t.single.Addr}, t.single.Dialer
	case t.cluster != nil:
		addrs, dial = t.cluster.Addrs, t.cluster.Dialer
	case t.failover != nil:
		addrs, dial = t.failover.SentinelAddrs, t.failover.Dialer
	}
	if dial == nil {
		d := &net.Dialer{Timeout: t.dialTimeout()}
		dial = d.DialContext
	}
	var first error
	for _, addr := range addrs {
		c, err := dial(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// explain adds to a failed check what it means and what to change, when
// the error tells. sentinel, when not nil, asks the sentinels what they
// know of the master.
func explain(err error, t *target, sentinel func() string) error {
	hint := hintFor(err, t)
	if t.kind == Sentinel && sentinel != nil {
		if s := sentinel(); s != "" {
			hint = s
		}
	}
	if hint == "" {
		return fmt.Errorf("the check of the store failed: %w", err)
	}
	return fmt.Errorf("the check of the store failed: %w; %s", err, hint)
}

// replyHints are the hints for a server's reply containing text, in the
// order they are tried.
var replyHints = []struct{ text, hint string }{
	{"WRONGPASS", "the server refused the user name and password: check the password (the URL's userinfo, or WithPassword) and the user"},
	{"NOAUTH", "the server requires a password: give it in the URL (redis://:PASSWORD@host:port) or with WithPassword"},
	{"without any password configured", "the server has no password set but one was given: remove it, or set requirepass on the server"},
	{"NOPERM", "the ACL user may not run scripts (EVAL_RO and the commands the stores send): grant them"},
	{"tls: first record does not look like a TLS handshake", "the server answers without TLS: write redis:// instead of rediss://"},
}

// hintFor says what to change for the failed check err of t, or "".
func hintFor(err error, t *target) string {
	msg := err.Error()
	if strings.Contains(msg, "looks like TLS (rediss://)") || strings.Contains(msg, "tls_") {
		return "" // the TLS dialer said why already
	}
	for _, h := range replyHints {
		if strings.Contains(msg, h.text) {
			return h.hint
		}
	}
	var op *net.OpError
	switch {
	case strings.Contains(msg, "malformed HTTP response") || strings.Contains(msg, "unexpected ") && t.tlsConfig() == nil && t.kind != Memory:
		return "the server does not speak plain Redis: if it has TLS on, write rediss://"
	case t.tlsConfig() == nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || strings.HasSuffix(msg, ": EOF")):
		return "the server closed the connection without a reply: if it speaks TLS only, write rediss://"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at that address: check the host and port, and that the server is up"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &op) && op.Timeout():
		return fmt.Sprintf("no answer within the dial timeout (%v) plus %v: check the address, the firewall and that the server is up "+
			"(a TLS server reached with redis:// also stays silent: write rediss://)", t.dialTimeout(), CheckMargin)
	}
	return ""
}

// maxListed bounds the master names a sentinel's answer puts in an error.
const maxListed = 10

// sentinelProblem asks a sentinel target's sentinels about its master, as
// the client dials them, for when the client could not reach it (go-redis
// then reports only "all sentinels ... are unreachable"). It returns ""
// when it learns nothing.
func sentinelProblem(ctx context.Context, t *target) string {
	var (
		addrs  []string
		master string
		opts   redis.Options
	)
	switch {
	case t.failover != nil:
		f := t.failover
		addrs, master = f.SentinelAddrs, f.MasterName
		opts = redis.Options{Username: f.SentinelUsername, Password: f.SentinelPassword, TLSConfig: f.TLSConfig, Dialer: f.Dialer,
			DialTimeout: f.DialTimeout}
	case t.kind == Sentinel && t.client == Rueidis:
		// rueidis dials sentinels without TLS unless told otherwise.
		r := t.rueidis
		addrs, master = r.InitAddress, r.Sentinel.MasterSet
		opts = redis.Options{Username: r.Sentinel.Username, Password: r.Sentinel.Password, TLSConfig: r.Sentinel.TLSConfig,
			DialTimeout: t.dialTimeout()}
	default:
		return ""
	}
	opts.MaxRetries = -1
	var dialErrs []string
	for _, addr := range addrs {
		o := opts
		o.Addr = addr
		sc := redis.NewSentinelClient(&o)
		_, err := sc.GetMasterAddrByName(ctx, master).Result()
		switch {
		case err == nil:
			_ = sc.Close()
			return "" // a sentinel knows the master: the master is at fault
		case errors.Is(err, redis.Nil):
			names := masterNames(ctx, sc)
			_ = sc.Close()
			return fmt.Sprintf("no sentinel monitors a master named %q: fix master_name (the sentinel at %s monitors %s)",
				clip(master, 64), addr, names)
		}
		_ = sc.Close()
		dialErrs = append(dialErrs, addr+": "+err.Error())
	}
	if len(dialErrs) > 0 {
		return "no sentinel answered: " + clip(strings.Join(dialErrs, "; "), 600)
	}
	return ""
}

// masterNames lists the masters a sentinel monitors, for an error.
func masterNames(ctx context.Context, sc *redis.SentinelClient) string {
	vals, err := sc.Masters(ctx).Result()
	if err != nil {
		return "masters it did not list (" + clip(err.Error(), 100) + ")"
	}
	var names []string
	for _, v := range vals {
		if name := fieldOf(v, "name"); name != "" && len(names) < maxListed {
			names = append(names, fmt.Sprintf("%q", clip(name, 64)))
		}
	}
	if len(names) == 0 {
		return "no master"
	}
	return strings.Join(names, ", ")
}

// fieldOf reads a field of a SENTINEL MASTERS entry, in RESP2 (a flat
// list of names and values) or RESP3 (a map).
func fieldOf(v any, name string) string {
	switch m := v.(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if k, _ := m[i].(string); k == name {
				s, _ := m[i+1].(string)
				return s
			}
		}
	case map[any]any:
		s, _ := m[name].(string)
		return s
	case map[string]any:
		s, _ := m[name].(string)
		return s
	}
	return ""
}

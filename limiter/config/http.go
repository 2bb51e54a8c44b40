package config

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/internal/suggest"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/limiter/httplimit"
	"github.com/limitkit/limitkit/limiter/internal/policydecode"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// HTTP is a policy's http block: the settings of the HTTP middleware
// Set.HTTP builds for the policy (package httplimit). Its zero value is
// httplimit's defaults, except that the headers name the policy after
// the policy. What a file cannot say (a logger, a handler of your own)
// comes as Set.HTTP's extra options.
type HTTP struct {
	// Key says how requests are keyed: one key, or several meaning the
	// first that finds one (httplimit.FirstOf). A key is "ip" (the
	// peer's address, httplimit.ClientIP; the default), "proxied_ip"
	// (the client behind TrustedProxies, httplimit.ProxiedClientIP),
	// "route" (the ServeMux pattern, httplimit.Route(nil): mount the
	// middleware inside the mux), "header:NAME" (httplimit.Header),
	// "query:NAME" (httplimit.Query), or several of those joined with
	// "+", meaning all at once (httplimit.Join), such as "ip+route".
	Key []string
	// TrustedProxies are the reverse proxies, as addresses or CIDR
	// networks, whose ProxyHeader a proxied_ip key believes. Required
	// with proxied_ip; refused without it.
	TrustedProxies []string
	// ProxyHeader is the header the proxies name the client in (default
	// X-Forwarded-For; Forwarded, X-Real-IP, ...). Only with proxied_ip.
	ProxyHeader string
	// IPv6Prefix, when not 0, keys IPv6 clients by their network of that
	// many bits, 1 to 128 (httplimit.IPv6Prefix; 64 is usual). It applies
	// to the ip and proxied_ip keys.
	IPv6Prefix int
	// Headers selects the rate-limit header fields: "draft" (the
	// default, httplimit.DraftHeaders), "x_ratelimit"
	// (httplimit.XRateLimitHeaders), "both" or "none".
	Headers string
	// PolicyName names the policy in the headers and problem bodies
	// (httplimit.WithPolicyName); printable ASCII. Default: the policy's
	// name.
	PolicyName string
	// ReleaseTimeout bounds the release of a concurrency policy's lease
	// (httplimit.WithReleaseTimeout; default
	// httplimit.DefaultReleaseTimeout).
	ReleaseTimeout time.Duration
	// OnError is what a request gets when the store cannot decide (Redis
	// down and no fallback): "serve" (the default: logged, let through)
	// or "refuse" (logged with slog.Default, answered 503 Service
	// Unavailable).
	OnError string
}

const (
	httpFields = "key, trusted_proxies, proxy_header, ipv6_prefix, headers, policy_name, release_timeout, on_error"
	keyForms   = `ip, proxied_ip, route, header:NAME or query:NAME, or several joined with "+" such as ip+route`
)

var (
	keyKinds     = []string{"ip", "proxied_ip", "route", "header", "query"}
	headerValues = []string{"draft", "x_ratelimit", "both", "none"}
	onErrorValue = []string{"serve", "refuse"}
)

func (d decoder) http(n *configtree.Node, path string) (*HTTP, error) {
	h := &HTTP{}
	return h, d.Each(n, path, func(f configtree.Pair, p string) (err error) {
		switch f.Key {
		case "key":
			if f.Val.Kind == configtree.ScalarNode && f.Val.Tag != configtree.NullTag {
				var s string
				s, err = d.Str(f.Val, p)
				h.Key = []string{s}
			} else {
				h.Key, err = d.Strings(f.Val, p)
				if h.Key == nil {
					h.Key = []string{} // written, and empty: refused
				}
			}
		case "trusted_proxies":
			h.TrustedProxies, err = d.Strings(f.Val, p)
		case "proxy_header":
			h.ProxyHeader, err = d.Str(f.Val, p)
		case "ipv6_prefix":
			h.IPv6Prefix, err = d.Int(f.Val, p)
		case "headers":
			h.Headers, err = d.Str(f.Val, p)
		case "policy_name":
			h.PolicyName, err = d.Str(f.Val, p)
		case "release_timeout":
			h.ReleaseTimeout, err = d.Duration(f.Val, p)
		case "on_error":
			h.OnError, err = d.Str(f.Val, p)
		default:
			err = d.Unknown(f, path, httpFields)
		}
		return err
	})
}

// policy splits a policy's mapping into its limit, which limiter decodes,
// and its http block, which is the file's own.
func (d decoder) policy(n *configtree.Node, path string) (any, *HTTP, error) {
	var block *HTTP
	if n.Kind == configtree.MapNode {
		rest := *n
		rest.Pairs = nil
		var seen *configtree.Pair
		for i, f := range n.Pairs {
			switch {
			case f.Key != "http":
				rest.Pairs = append(rest.Pairs, f)
			case seen != nil:
				d.Report(&configtree.Error{Line: f.KeyLine, Field: path + ".http", Err: fmt.Errorf("given twice (also on line %d)", seen.KeyLine)})
			default:
				seen = &n.Pairs[i]
				h, err := d.http(f.Val, path+".http")
				if err != nil {
					d.Report(err)
				}
				d.Lines[path+".http"] = f.KeyLine // errors about the whole block point at its name
				block = h
			}
		}
		n = &rest
	}
	inner := d.Decoder
	inner.Report = func(err error) { d.Report(d.withHTTPField(err, n, path)) }
	v, err := policydecode.Config(inner, n, path)
	return v, block, err
}

// withHTTPField adds http to the fields an unknown field of the policy at
// path is told about (limiter lists its own), so that "htpp" gets its
// suggestion.
func (d decoder) withHTTPField(err error, n *configtree.Node, path string) error {
	var se *configtree.Error
	const lead = "; the fields here are "
	if !errors.As(err, &se) || !strings.HasPrefix(se.Err.Error(), "unknown field") {
		return err
	}
	_, known, ok := strings.Cut(se.Err.Error(), lead)
	if !ok {
		return err
	}
	for _, f := range n.Pairs {
		if path+"."+f.Key == se.Field {
			return d.Unknown(f, path, known+", http")
		}
	}
	return err
}

// keyPart is one part of a key: its kind and, for header and query, the
// name.
type keyPart struct{ kind, name string }

// parseKey reads one entry of http.key.
func parseKey(s string) ([]keyPart, error) {
	var parts []keyPart
	for p := range strings.SplitSeq(s, "+") {
		p = strings.TrimSpace(p)
		kind, name, named := strings.Cut(p, ":")
		switch {
		case !named && (kind == "ip" || kind == "proxied_ip" || kind == "route"):
		case named && kind == "header":
			if !validToken(name) {
				return nil, fmt.Errorf("%q is not a header name; write it like header:X-API-Key", clip(name, 40))
			}
		case named && kind == "query":
			if name == "" {
				return nil, errors.New("query: needs the parameter's name; write it like query:api_key")
			}
		default:
			what := "a key"
			if s != p {
				what = "a key part"
			}
			return nil, fmt.Errorf("%q is not %s%s; write %s", clip(p, 40), what, suggest.DidYouMean(kind, keyKinds), keyForms)
		}
		parts = append(parts, keyPart{kind, name})
	}
	return parts, nil
}

// validToken reports whether s is a header name (RFC 9110 token).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// keys returns the entries of the key, the default one when none is set.
func (h *HTTP) keys() []string {
	if h.Key == nil {
		return []string{"ip"}
	}
	return h.Key
}

// validateHTTP checks the http block of the policy at path.
func (c *Config) validateHTTP(l *errorList, path string, h *HTTP) {
	if h == nil {
		return
	}
	path += ".http"
	keyField := func(i int) string {
		if len(h.Key) == 1 {
			return path + ".key"
		}
		return path + ".key." + strconv.Itoa(i)
	}
	proxied, address := c.validateHTTPKey(l, path, h, keyField)
	c.validateProxies(l, path, h, keyField, proxied)
	if h.IPv6Prefix != 0 {
		if h.IPv6Prefix < 1 || h.IPv6Prefix > 128 {
			l.add(c.fieldError(path+".ipv6_prefix", fmt.Errorf("is %d; give 1 to 128 (64 is usual), or remove it to key each address", h.IPv6Prefix)))
		} else if !address {
			l.add(c.fieldError(path+".ipv6_prefix", errors.New("applies to ip and proxied_ip keys, and no key is one; remove it")))
		}
	}
	c.checkWord(l, path+".headers", h.Headers, headerValues)
	c.checkWord(l, path+".on_error", h.OnError, onErrorValue)
	if h.PolicyName != "" {
		if err := ratelimitfields.CheckName(h.PolicyName); err != nil {
			l.add(c.fieldError(path+".policy_name", err))
		}
	} else if c.lines[path+".policy_name"] != 0 {
		l.add(c.fieldError(path+".policy_name", errors.New("is empty; write the name the headers give the policy, or remove it for the policy's own")))
	}
	if h.ReleaseTimeout < 0 || h.ReleaseTimeout == 0 && c.lines[path+".release_timeout"] != 0 {
		l.add(c.fieldError(path+".release_timeout", fmt.Errorf("is %v; write a positive duration such as \"2s\", or remove it for the default %v",
			h.ReleaseTimeout, httplimit.DefaultReleaseTimeout)))
	}
}

// validateHTTPKey checks the key entries of the http block at path, and
// returns the first entry keyed by proxied_ip (-1: none) and whether any
// entry keys by an address.
func (c *Config) validateHTTPKey(l *errorList, path string, h *HTTP, keyField func(int) string) (proxied int, address bool) {
	if h.Key != nil && len(h.Key) == 0 {
		l.add(c.fieldError(path+".key", fmt.Errorf("is empty; write a key such as ip or header:X-API-Key (a list means the first that finds one)")))
	}
	proxied = -1
	for i, k := range h.keys() {
		parts, err := parseKey(k)
		if err != nil {
			l.add(c.fieldError(keyField(i), err))
			continue
		}
		for _, p := range parts {
			if p.kind == "proxied_ip" && proxied < 0 {
				proxied = i
			}
			address = address || p.kind == "ip" || p.kind == "proxied_ip"
		}
	}
	return proxied, address
}

// validateProxies checks trusted_proxies and proxy_header of the http
// block at path, which only a proxied_ip key (entry proxied) reads.
func (c *Config) validateProxies(l *errorList, path string, h *HTTP, keyField func(int) string, proxied int) {
	for i, t := range h.TrustedProxies {
		if _, err := httplimit.ProxiedClientIP("", t); err != nil {
			l.add(c.fieldError(path+".trusted_proxies."+strconv.Itoa(i), untagged(err)))
		}
	}
	switch {
	case proxied >= 0 && len(h.TrustedProxies) == 0:
		l.add(c.fieldError(keyField(proxied), errors.New("proxied_ip needs trusted_proxies: list your proxies' addresses or networks, or key by ip to ignore forwarding headers")))
	case proxied < 0 && h.TrustedProxies != nil:
		l.add(c.fieldError(path+".trusted_proxies", errors.New("no key is proxied_ip, so nothing reads them; write key: proxied_ip, or remove trusted_proxies")))
	}
	if h.ProxyHeader != "" {
		if _, err := httplimit.ProxiedClientIP(h.ProxyHeader, "127.0.0.1"); err != nil {
			l.add(c.fieldError(path+".proxy_header", fmt.Errorf("%q is not a header name; write it like X-Forwarded-For", clip(h.ProxyHeader, 40))))
		} else if proxied < 0 {
			l.add(c.fieldError(path+".proxy_header", errors.New("no key is proxied_ip, so nothing reads it; write key: proxied_ip, or remove proxy_header")))
		}
	}
}

// checkWord checks that v, when set, is one of words.
func (c *Config) checkWord(l *errorList, field, v string, words []string) {
	if v == "" && c.lines[field] == 0 {
		return
	}
	for _, w := range words {
		if v == w {
			return
		}
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = strconv.Quote(w)
	}
	list := strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
	l.add(c.fieldError(field, fmt.Errorf("%q%s: write %s", clip(v, 40), suggest.DidYouMean(v, words), list)))
}

// untagged drops httplimit's prefix from err, which the field replaces.
func untagged(err error) error {
	msg, ok := strings.CutPrefix(err.Error(), "httplimit: ")
	if !ok {
		return err
	}
	return errors.New(msg)
}

// options are the httplimit options of the validated block h (nil: the
// defaults) of the policy name.
func (h *HTTP) options(name string) ([]httplimit.Option, error) {
	if h == nil {
		h = &HTTP{}
	}
	key, err := h.keyFunc()
	if err != nil {
		return nil, err
	}
	policy := cmp.Or(h.PolicyName, name)
	opts := []httplimit.Option{httplimit.WithKey(key), httplimit.WithPolicyName(policy)}
	switch h.Headers {
	case "x_ratelimit":
		opts = append(opts, httplimit.WithHeaders(httplimit.XRateLimitHeaders))
	case "both":
		opts = append(opts, httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.XRateLimitHeaders))
	case "none":
		opts = append(opts, httplimit.WithHeaders(0))
	}
	if h.ReleaseTimeout > 0 {
		opts = append(opts, httplimit.WithReleaseTimeout(h.ReleaseTimeout))
	}
	if h.OnError == "refuse" {
		opts = append(opts, httplimit.WithErrorHandler(refuse(policy)))
	}
	return opts, nil
}

// keyFunc is the key func of h's key entries.
func (h *HTTP) keyFunc() (httplimit.KeyFunc, error) {
	var entries []httplimit.KeyFunc
	for _, k := range h.keys() {
		parts, err := parseKey(k)
		if err != nil {
			return nil, err
		}
		var fs []httplimit.KeyFunc
		for _, p := range parts {
			f, err := h.part(p)
			if err != nil {
				return nil, err
			}
			fs = append(fs, f)
		}
		if len(fs) == 1 {
			entries = append(entries, fs[0])
		} else {
			entries = append(entries, httplimit.Join(fs...))
		}
	}
	if len(entries) == 1 {
		return entries[0], nil
	}
	return httplimit.FirstOf(entries...), nil
}

// part is the key func of one key part.
func (h *HTTP) part(p keyPart) (httplimit.KeyFunc, error) {
	var f httplimit.KeyFunc
	switch p.kind {
	case "ip":
		f = httplimit.ClientIP()
	case "proxied_ip":
		var err error
		if f, err = httplimit.ProxiedClientIP(h.ProxyHeader, h.TrustedProxies...); err != nil {
			return nil, err
		}
	case "route":
		return httplimit.Route(nil), nil
	case "header":
		return httplimit.Header(p.name), nil
	default:
		return httplimit.Query(p.name), nil
	}
	if h.IPv6Prefix == 0 {
		return f, nil
	}
	return httplimit.IPv6Prefix(h.IPv6Prefix, f)
}

// refuse is the error handler of on_error: refuse.
func refuse(policy string) httplimit.ErrorHandler {
	return func(w http.ResponseWriter, r *http.Request, err error) bool {
		path := ""
		if r.URL != nil {
			path = r.URL.Path
		}
		slog.Default().LogAttrs(r.Context(), slog.LevelError, "limitkit: rate limit not decided; request refused",
			slog.String("policy", policy), slog.String("method", r.Method), slog.String("path", path), slog.Any("error", err))
		http.Error(w, "503 service unavailable: the rate limit could not be checked; retry later", http.StatusServiceUnavailable)
		return false
	}
}

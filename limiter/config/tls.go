package config

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// A rediss:// URL pointed at a server without TLS fails in the handshake:
// the server reads the ClientHello as an unfinished inline command and
// waits, so the client sees only a deadline. The dialers below do the
// handshake themselves and, when it fails, ask the server in plain RESP
// whether it is a Redis without TLS, to say so in the error.

// probeTimeout bounds the plain-text probe after a failed handshake.
const probeTimeout = 300 * time.Millisecond

// probeTTL is how long a probe's answer is reused for an address, so that
// a misconfigured pool pays for one probe, not one per dial.
const probeTTL = 30 * time.Second

// tlsDialer is a go-redis Dialer that does what its default one does for
// TLS (dial, then handshake), honouring ctx and timeout, and explains a
// handshake with a server that speaks plain Redis.
func tlsDialer(conf *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialTLS(ctx, &net.Dialer{Timeout: timeout}, network, addr, conf)
	}
}

// rueidisTLSDial is a rueidis DialCtxFn doing the same.
func rueidisTLSDial(ctx context.Context, addr string, dialer *net.Dialer, conf *tls.Config) (net.Conn, error) {
	return dialTLS(ctx, dialer, "tcp", addr, conf)
}

func dialTLS(ctx context.Context, dialer *net.Dialer, network, addr string, conf *tls.Config) (net.Conn, error) {
	raw, err := dialer.DialContext(ctx, network, addr)
	if err != nil || conf == nil {
		// No TLS config: a connection the URL did not ask TLS for (a
		// rueidis sentinel's, say).
		return raw, err
	}
	if conf.ServerName == "" {
		// As tls.DialWithDialer does: verify the host dialled.
		conf = conf.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			conf.ServerName = host
		}
	}
	hctx := ctx
	if dialer.Timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, dialer.Timeout)
		defer cancel()
	}
	c := tls.Client(raw, conf)
	if err := c.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		if plainRedis(network, addr) {
			return nil, fmt.Errorf("TLS handshake with %s: %w; the server answers plain Redis (RESP): this looks like TLS "+
				"(rediss://) to a non-TLS server; write redis:// or enable TLS on the server", addr, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return c, nil
}

var probes struct {
	sync.Mutex
	m map[string]probeResult
}

type probeResult struct {
	plain bool
	at    time.Time
}

// plainRedis reports whether addr answers PING in plain RESP. It runs on
// its own short bound: the caller's context may already be spent.
func plainRedis(network, addr string) bool {
	probes.Lock()
	if r, ok := probes.m[addr]; ok && time.Since(r.at) < probeTTL {
		probes.Unlock()
		return r.plain
	}
	probes.Unlock()
	plain := probe(network, addr)
	probes.Lock()
	if probes.m == nil || len(probes.m) > 1024 {
		probes.m = map[string]probeResult{}
	}
	probes.m[addr] = probeResult{plain: plain, at: time.Now()}
	probes.Unlock()
	return plain
}

func probe(network, addr string) bool {
	c, err := net.DialTimeout(network, addr, probeTimeout)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return false
	}
	// +PONG, or -NOAUTH / -ERR from a server that wants a password. A TLS
	// server answers with an alert record (0x15) or closes.
	return b[0] == '+' || b[0] == '-'
}

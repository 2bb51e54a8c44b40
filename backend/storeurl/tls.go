package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/limitkit/limitkit/internal/suggest"
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
	conf = conf.Clone()
	if conf.ServerName == "" {
		// As tls.DialWithDialer does: verify the host dialled.
		if host, _, err := net.SplitHostPort(addr); err == nil {
			conf.ServerName = host
		}
	}
	// Note whether the server asks for a client certificate, to explain
	// its refusal.
	asked, sentCert := false, false
	certs, getCert := conf.Certificates, conf.GetClientCertificate
	conf.GetClientCertificate = func(info *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked = true
		if getCert != nil {
			c, err := getCert(info)
			sentCert = err == nil && c != nil && len(c.Certificate) > 0
			return c, err
		}
		if len(certs) == 0 {
			return &tls.Certificate{}, nil
		}
		sentCert = true
		return &certs[0], nil
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
		if hint := explainTLS(err, asked, sentCert); hint != "" {
			return nil, fmt.Errorf("TLS handshake with %s: %w; %s", addr, err, hint)
		}
		if plainRedis(network, addr) {
			return nil, fmt.Errorf("TLS handshake with %s: %w; the server answers plain Redis (RESP): this looks like TLS "+
				"(rediss://) to a non-TLS server; write redis:// or enable TLS on the server", addr, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	if asked {
		deadline, _ := hctx.Deadline()
		if err := confirm(c, addr, deadline, sentCert); err != nil {
			_ = raw.Close()
			return nil, err
		}
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

// tlsURLOptions are the query options this package reads for TLS on every
// rediss URL form and both clients; the client parsers never see them.
var tlsURLOptions = []string{"tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// tlsSettings are a URL's tls_ options.
type tlsSettings struct {
	ca, cert, key, serverName string
}

func (s tlsSettings) set() bool { return s != tlsSettings{} }

// takeTLSOptions removes the tls_ options from q and returns them. An
// option starting "tls_" that is not one of them is an error, so a typo
// does not leave verification at its default.
func takeTLSOptions(q url.Values) (tlsSettings, error) {
	var s tlsSettings
	for k, vs := range q {
		if !strings.HasPrefix(strings.ToLower(k), "tls_") {
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "tls_ca":
			s.ca = v
		case "tls_cert":
			s.cert = v
		case "tls_key":
			s.key = v
		case "tls_server_name":
			s.serverName = v
		default:
			return s, fmt.Errorf("no URL option %q%s; the TLS options are %s", clip(k, 40), suggest.DidYouMean(k, tlsURLOptions),
				strings.Join(tlsURLOptions, ", "))
		}
		if v == "" {
			return s, fmt.Errorf("%s is empty; give a value or leave the option out", k)
		}
		q.Del(k)
	}
	if (s.cert == "") != (s.key == "") {
		return s, errors.New("tls_cert and tls_key go together: give the client certificate and its private key (PEM files)")
	}
	return s, nil
}

// apply reads the files s names into conf, the TLS configuration the
// client parser made for a rediss URL. Errors name the option at fault and
// never quote a file's contents.
func (s tlsSettings) apply(conf *tls.Config) error {
	if s.ca != "" {
		pem, err := readTLSFile(s.ca)
		if err != nil {
			return fmt.Errorf("tls_ca: cannot read the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls_ca: %s holds no PEM certificate; give the CA's certificate in PEM (\"-----BEGIN CERTIFICATE-----\")",
				clip(s.ca, 200))
		}
		conf.RootCAs = pool
	}
	if s.cert != "" {
		certPEM, err := readTLSFile(s.cert)
		if err != nil {
			return fmt.Errorf("tls_cert: cannot read the client certificate: %w", err)
		}
		keyPEM, err := readTLSFile(s.key)
		if err != nil {
			return fmt.Errorf("tls_key: cannot read the client key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			if strings.Contains(err.Error(), "does not match") {
				return fmt.Errorf("tls_cert and tls_key do not match: the key is not the certificate's: %w", err)
			}
			return fmt.Errorf("tls_cert, tls_key: not a PEM certificate and its PEM private key: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	if s.serverName != "" {
		conf.ServerName = s.serverName
	}
	return nil
}

// MaxTLSFileSize bounds each file tls_ca, tls_cert and tls_key name: a CA
// bundle of some hundred certificates fits, and a wrong path (a device, a
// log) cannot exhaust memory.
const MaxTLSFileSize = 1 << 20

// readTLSFile reads path, refusing more than MaxTLSFileSize bytes; it
// reads at most one byte more, whatever the file is.
func readTLSFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTLSFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxTLSFileSize {
		return nil, fmt.Errorf("%s holds more than %d bytes (MaxTLSFileSize), more than any PEM file of certificates or a key: check the path",
			clip(path, 200), MaxTLSFileSize)
	}
	return data, nil
}

// explainTLS says which TLS setting a failed handshake or a refused
// connection points at; "" when it cannot tell. asked reports whether the
// server asked for a client certificate, sentCert whether one was sent.
func explainTLS(err error, asked, sentCert bool) string {
	var (
		host    x509.HostnameError
		unknown x509.UnknownAuthorityError
		op      *net.OpError
	)
	switch {
	case errors.As(err, &host):
		return "the server's certificate does not hold the name checked (tls_server_name, or the host dialled without it); " +
			"set tls_server_name to a name the certificate holds"
	case errors.As(err, &unknown):
		return "the server's certificate is not signed by a CA in tls_ca (the system's trust store without tls_ca); " +
			"set tls_ca to the PEM file of the CA that signed it"
	case asked && errors.As(err, &op) && op.Op == "remote error":
		// An alert from the server: with TLS 1.3 it refuses a client
		// certificate only after the client finished its handshake.
		if !sentCert {
			return "the server refused the connection: it requires a client certificate (tls-auth-clients yes); set tls_cert and tls_key"
		}
		return "the server refused the client certificate (tls_cert): check it is signed by a CA the server trusts (its tls-ca-cert-file)"
	}
	return ""
}

// confirm makes sure a server that asked for a client certificate took
// the connection. With TLS 1.3 the server checks the certificate (or its
// absence) only after the client has finished its handshake, and refuses
// with an alert, or a reset, that the client library would meet later in
// a reply. So ask for a PING (one round trip, on new connections to such
// servers only) and explain a refusal: any RESP reply, even an error such
// as NOAUTH, means the TLS session stands.
func confirm(c *tls.Conn, addr string, deadline time.Time, sentCert bool) error {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	// A RESP array, not an inline command: proxies may take only arrays.
	_, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	var line [256]byte
	n := 0
	for err == nil && (n == 0 || line[n-1] != '\n') && n < len(line) {
		var m int
		m, err = c.Read(line[n:])
		n += m
	}
	switch {
	case err == nil && (line[0] == '+' || line[0] == '-'):
		return nil
	case err == nil:
		return fmt.Errorf("TLS with %s: the server's answer to PING is not Redis's", addr)
	}
	if hint := explainTLS(err, true, sentCert); hint != "" {
		return fmt.Errorf("TLS with %s: %w; %s", addr, err, hint)
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) {
		// The alert was lost to the reset.
		if sentCert {
			return fmt.Errorf("TLS with %s: %w; the server closed the connection after the handshake: it refused the client "+
				"certificate (tls_cert); check it is signed by a CA the server trusts (its tls-ca-cert-file)", addr, err)
		}
		return fmt.Errorf("TLS with %s: %w; the server closed the connection after asking for a client certificate: it "+
			"requires one (tls-auth-clients yes); set tls_cert and tls_key", addr, err)
	}
	return fmt.Errorf("TLS with %s: no answer to PING after the handshake: %w", addr, err)
}

package redistest

import (
	"crypto/tls"
	"strconv"
	"testing"
)

// tlsOptions are WithTLS's files and the client side of Do.
type tlsOptions struct {
	cert, key, ca string
	client        *tls.Config
}

// WithTLS makes a Start server TLS-only: it listens with TLS on its port
// (--port 0 --tls-port PORT) with the server's certificate and key and the
// CA it checks client certificates against (PEM files), and Do, DoValue
// and the readiness probe speak TLS with client. client must trust the
// server's certificate and, when the server requires client certificates
// (WithArgs("--tls-auth-clients", "yes"), its default), hold one; an empty
// ServerName verifies the address dialled (127.0.0.1). StartCluster,
// StartSentinel and StartReplica refuse it.
func WithTLS(certFile, keyFile, caFile string, client *tls.Config) Option {
	return func(o *options) { o.tls = &tlsOptions{cert: certFile, key: keyFile, ca: caFile, client: client} }
}

// spec makes a data node's spec TLS-only: the settings come after the
// package's and the caller's, so that they win.
func (t *tlsOptions) spec(s serverSpec) serverSpec {
	args := s.args
	s.args = func(srv *Server, port int) []string {
		return append(args(srv, port), "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.cert, "--tls-key-file", t.key, "--tls-ca-cert-file", t.ca)
	}
	s.client = t.client
	return s
}

// refuseTLS fails the test when opts ask for TLS where only Start has it.
func refuseTLS(t testing.TB, o options, what string) {
	t.Helper()
	if o.tls != nil {
		t.Fatalf("redistest: %s does not support WithTLS (only Start does)", what)
	}
}

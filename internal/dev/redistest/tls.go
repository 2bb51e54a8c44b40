package redistest

import (
	"crypto/tls"
	"strconv"
)

// tlsOptions are WithTLS's files and the client side of Do.
type tlsOptions struct {
	cert, key, ca string
	client        *tls.Config
	sentinels     bool // WithTLSSentinels
}

// WithTLS makes data nodes TLS-only: each listens with TLS on its port
// (--port 0 --tls-port PORT) with the server's certificate and key and the
// CA it checks client certificates against (PEM files), and Do, DoValue
// and the readiness probe speak TLS with client. client must trust the
// server's certificate and, when the server requires client certificates
// (WithArgs("--tls-auth-clients", "yes"), its default), hold one; an empty
// ServerName verifies the address dialled (127.0.0.1). Replicas replicate
// over TLS, presenting the server's certificate (so it needs the
// client-auth usage). With StartSentinel the sentinels listen in plain
// RESP (and with TLS too after WithTLSSentinels) and reach the master and
// replica over TLS. StartCluster's nodes also gossip over TLS
// (--tls-cluster yes), presenting the server's certificate.
func WithTLS(certFile, keyFile, caFile string, client *tls.Config) Option {
	return func(o *options) {
		sentinels := o.tls != nil && o.tls.sentinels
		o.tls = &tlsOptions{cert: certFile, key: keyFile, ca: caFile, client: client, sentinels: sentinels}
	}
}

// WithTLSSentinels, after WithTLS, gives StartSentinel's sentinels a TLS
// port beside their plain one (Sentinel.SentinelTLSAddrs), which they
// announce to each other and to clients: for clients that dial sentinels
// with TLS. Without it they listen in plain RESP only.
func WithTLSSentinels() Option {
	return func(o *options) {
		if o.tls != nil {
			o.tls.sentinels = true
		}
	}
}

// spec makes a data node's spec TLS-only: the settings come after the
// package's and the caller's, so that they win.
func (t *tlsOptions) spec(s serverSpec) serverSpec {
	args := s.args
	s.args = func(srv *Server, port int) []string {
		return append(args(srv, port), "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.cert, "--tls-key-file", t.key, "--tls-ca-cert-file", t.ca, "--tls-replication", "yes",
			"--tls-cluster", "yes")
	}
	s.client = t.client
	return s
}

// tlsSpec is s made TLS-only when o asks for it.
func (o options) tlsSpec(s serverSpec) serverSpec {
	if o.tls == nil {
		return s
	}
	return o.tls.spec(s)
}

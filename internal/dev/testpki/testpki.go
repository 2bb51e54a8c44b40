// Package testpki makes a private CA, server and client certificates for
// TLS tests against real redis-server processes.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PKI is a private CA and the certificates the TLS tests use, made at run
// time and written as PEM files to a temporary directory.
type PKI struct {
	Dir                   string
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for ServerName and 127.0.0.1
	ClientCert, ClientKey string // signed by the CA
	RogueCert, RogueKey   string // a client certificate of another CA
	OtherKey              string // a key of no certificate here
	// Client trusts the CA and holds the client certificate.
	Client *tls.Config
}

// ServerName is the DNS name in the server's certificate.
const ServerName = "redis.limitkit.test"

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

// issue makes a certificate for tmpl's names signed by by (self-signed when
// by is nil) and writes it and its key to name.crt and name.key.
func (p *PKI) issue(t testing.TB, name string, tmpl *x509.Certificate, by *issuer) (issuer, string, string) {
	t.Helper()
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl.SerialNumber = serial
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	parent, signer := tmpl, key
	if by != nil {
		parent, signer = by.cert, by.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certPath, keyPath := filepath.Join(p.Dir, name+".crt"), filepath.Join(p.Dir, name+".key")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return issuer{cert, key}, certPath, keyPath
}

// New makes a PKI in a directory of t.TempDir.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	caTmpl := func() *x509.Certificate {
		return &x509.Certificate{IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	ca, caPath, _ := p.issue(t, "ca", caTmpl(), nil)
	p.CA = caPath
	_, p.ServerCert, p.ServerKey = p.issue(t, "server", &x509.Certificate{
		DNSNames: []string{ServerName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, &ca)
	clientTmpl := func() *x509.Certificate {
		return &x509.Certificate{KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	}
	_, p.ClientCert, p.ClientKey = p.issue(t, "client", clientTmpl(), &ca)
	rogue, _, _ := p.issue(t, "rogue-ca", caTmpl(), nil)
	_, p.RogueCert, p.RogueKey = p.issue(t, "rogue-client", clientTmpl(), &rogue)
	_, _, p.OtherKey = p.issue(t, "other", clientTmpl(), &ca)

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	require.NoError(t, err)
	p.Client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}
	return p
}

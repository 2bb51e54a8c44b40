package redistest_test

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

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to dir and returns their paths and a client configuration trusting it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, &tls.Config{RootCAs: pool}
}

// TestWithTLS: a WithTLS server answers Do over TLS on its port and has no
// plain port (control: a plain RESP exchange on the port gets no reply,
// and the server reports port 0).
func TestWithTLS(t *testing.T) {
	certFile, keyFile, client := selfSigned(t, t.TempDir())
	srv := redistest.Start(t, redistest.WithTLS(certFile, keyFile, certFile, client),
		redistest.WithArgs("--tls-auth-clients", "no"))
	got, err := srv.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", got)
	got, err = srv.Do("CONFIG", "GET", "port")
	require.NoError(t, err)
	require.Equal(t, "port\n0", got)

	c, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(500*time.Millisecond)))
	_, err = c.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	var b [16]byte
	n, _ := c.Read(b[:])
	require.NotEqual(t, "+PONG\r\n", string(b[:n]), "the port answers plain RESP")
}

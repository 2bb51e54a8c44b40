package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/limitkit/limitkit/internal/dev/testpki"
)

func copyInto(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

// TestGRPCCertificateRotation: the listener's certificate, key and client
// CA rewritten in place (as cert-manager renews them) are served to new
// connections; a connection opened before keeps working.
func TestGRPCCertificateRotation(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")
	certs := t.TempDir()
	cert, key, ca := filepath.Join(certs, "tls.crt"), filepath.Join(certs, "tls.key"), filepath.Join(certs, "ca.crt")
	copyInto(t, a.ServerCert, cert)
	copyInto(t, a.ServerKey, key)
	copyInto(t, a.CA, ca)
	env := baseEnv(root)
	env["GRPC_SERVER_USE_TLS"], env["GRPC_SERVER_TLS_CERT"], env["GRPC_SERVER_TLS_KEY"] = "true", cert, key
	env["GRPC_CLIENT_TLS_CACERT"], env["LIMITKIT_TLS_RELOAD_INTERVAL"] = ca, "20ms"
	in := startTLS(t, env, a.Client)

	// call asks once on conn and returns the server certificate it saw.
	call := func(conn *grpc.ClientConn) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var p peer.Peer
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}}, grpc.Peer(&p))
		if err != nil {
			return nil, err
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.PeerCertificates) == 0 {
			t.Fatalf("no TLS peer: %T", p.AuthInfo)
		}
		return info.State.PeerCertificates[0].Raw, nil
	}
	leaf := func(p *testpki.PKI) []byte {
		pair, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
		if err != nil {
			t.Fatal(err)
		}
		return pair.Certificate[0]
	}
	got, err := call(in.conn)
	if err != nil || !bytes.Equal(got, leaf(a)) {
		t.Fatalf("before rotation: %v, first certificate %v", err, bytes.Equal(got, leaf(a)))
	}

	copyInto(t, b.ServerCert, cert)
	copyInto(t, b.ServerKey, key)
	copyInto(t, b.CA, ca)
	fresh, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(b.Client)))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	eventually(t, "a new connection served the new certificate", func() bool {
		got, err := call(fresh)
		return err == nil && bytes.Equal(got, leaf(b))
	})
	// The connection opened before: its client trusts only the old CA, so
	// an answer with the old certificate means the connection was kept.
	got, err = call(in.conn)
	if err != nil || !bytes.Equal(got, leaf(a)) {
		t.Fatalf("the open connection after rotation: %v (old certificate: %v)", err, bytes.Equal(got, leaf(a)))
	}
	// A new connection of the old CA's client is refused.
	stale, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(a.Client)))
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if _, err := call(stale); err == nil {
		t.Fatal("a new connection of the replaced CA was answered")
	}
}

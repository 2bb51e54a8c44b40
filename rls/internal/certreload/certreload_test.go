package certreload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/testpki"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func leafOf(t *testing.T, path string) []byte {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return pair.Certificate[0]
}

// logBuffer counts log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// fakeNow is a clock moved by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// TestInPlaceRotation: a pair written over the files is served at the next
// use; a torn pair keeps the old one and logs once.
func TestInPlaceRotation(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.ServerCert, cert)
	copyFile(t, a.ServerKey, key)
	logs := &logBuffer{}
	r, err := New(Files{Cert: cert, Key: key, Name: "test"}, time.Minute, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeNow{t: time.Now()}
	r.now = clock.now
	if !bytes.Equal(r.Certificate().Certificate[0], leafOf(t, a.ServerCert)) {
		t.Fatal("not the first certificate")
	}

	// The certificate written before its key: torn, refused, logged once.
	copyFile(t, b.ServerCert, cert)
	clock.add(time.Minute)
	for range 3 {
		clock.add(time.Minute)
		if !bytes.Equal(r.Certificate().Certificate[0], leafOf(t, a.ServerCert)) {
			t.Fatal("a torn pair replaced the good one")
		}
	}
	if n := logs.count("do not load"); n != 1 {
		t.Fatalf("a torn pair logged %d times, want once", n)
	}

	// The key follows: the files changed (size, time), so the pair is
	// loaded at the next use, before the interval.
	copyFile(t, b.ServerKey, key)
	if !bytes.Equal(r.Certificate().Certificate[0], leafOf(t, b.ServerCert)) {
		t.Fatal("the new pair not loaded once its files changed")
	}
	if n := logs.count("reloaded"); n != 1 {
		t.Fatalf("%d reload lines, want 1", n)
	}
}

// TestSymlinkSwap: Kubernetes updates a secret volume by pointing ..data
// at a new directory; the files' names never change.
func TestSymlinkSwap(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	dir := t.TempDir()
	write := func(name string, p *testpki.PKI) {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, p.ServerCert, filepath.Join(d, "tls.crt"))
		copyFile(t, p.ServerKey, filepath.Join(d, "tls.key"))
		copyFile(t, p.CA, filepath.Join(d, "ca.crt"))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..2026_01", a)
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt"), Name: "test"},
		time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	write("..2026_02", b)
	changed, err := r.Check()
	if err != nil || !changed {
		t.Fatalf("after the swap: changed %v, %v", changed, err)
	}
	if !bytes.Equal(r.Certificate().Certificate[0], leafOf(t, b.ServerCert)) {
		t.Fatal("the swapped pair not in force")
	}
	bCA := leafOf(t, b.ClientCert)
	c, _ := x509.ParseCertificate(bCA)
	if _, err := c.Verify(x509.VerifyOptions{Roots: r.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the swapped CA not in force: %v", err)
	}
	if changed, err := r.Check(); changed || err != nil {
		t.Fatalf("nothing changed: %v %v", changed, err)
	}
}

func TestNewErrors(t *testing.T) {
	p := testpki.New(t)
	for _, c := range []struct {
		f    Files
		want string
	}{
		{Files{Cert: p.ServerCert, Name: "X"}, "together"},
		{Files{Name: "X"}, "no file"},
		{Files{Cert: p.ServerCert, Key: p.OtherKey, Name: "X"}, "X"},
		{Files{CA: p.ServerKey, Name: "X"}, "no PEM certificate"},
		{Files{CA: filepath.Join(t.TempDir(), "missing"), Name: "X"}, "X"},
	} {
		if _, err := New(c.f, time.Second, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}

// TestServerRotationKeepsConnections: over real TLS, a new connection
// sees the new certificate and client CA; an open one keeps working.
func TestServerRotationKeepsConnections(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	dir := t.TempDir()
	cert, key, ca := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	copyFile(t, a.ServerCert, cert)
	copyFile(t, a.ServerKey, key)
	copyFile(t, a.CA, ca)
	r, err := New(Files{Cert: cert, Key: key, CA: ca, Name: "test"}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := serveTLS(t, r.ServerConfig(nil), func(c *tls.Conn) { // echo
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
	dial := func(p *testpki.PKI) (*tls.Conn, error) {
		conf := p.Client.Clone()
		conf.ServerName = testpki.ServerName
		return tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", l.Addr().String(), conf)
	}
	echo := func(c *tls.Conn) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(buf)
		return err
	}
	old, err := dial(a)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := echo(old); err != nil {
		t.Fatal(err)
	}

	copyFile(t, b.ServerCert, cert)
	copyFile(t, b.ServerKey, key)
	copyFile(t, b.CA, ca)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("rotation: %v %v", changed, err)
	}
	fresh, err := dial(b)
	if err != nil {
		t.Fatalf("a new connection with the new CA's client: %v", err)
	}
	defer fresh.Close()
	if got := fresh.ConnectionState().PeerCertificates[0].Raw; !bytes.Equal(got, leafOf(t, b.ServerCert)) {
		t.Fatal("a new connection got the old certificate")
	}
	if err := echo(fresh); err != nil {
		t.Fatal(err)
	}
	if err := echo(old); err != nil {
		t.Fatalf("the open connection broke: %v", err)
	}
	// The old CA's client is refused now (TLS 1.3 reports it on first use).
	if c, err := dial(a); err == nil {
		err = echo(c)
		c.Close()
		if err == nil {
			t.Fatal("a client of the replaced CA was accepted")
		}
	}
}

// TestClientConfig: the client presents the certificate in force and
// verifies the server against the CA in force and the name asked.
func TestClientConfig(t *testing.T) {
	p := testpki.New(t)
	r, err := New(Files{Cert: p.ClientCert, Key: p.ClientKey, CA: p.CA, Name: "test"}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Files{Cert: p.ServerCert, Key: p.ServerKey, CA: p.CA, Name: "srv"}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := serveTLS(t, srv.ServerConfig(nil), func(c *tls.Conn) { _ = c.Handshake(); _, _ = c.Write([]byte("x")) })
	try := func(name string) error {
		c, err := tls.Dial("tcp", l.Addr().String(), r.ClientConfig(name))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		return err
	}
	if err := try(testpki.ServerName); err != nil {
		t.Fatalf("the right name: %v", err)
	}
	if err := try("127.0.0.1"); err != nil {
		t.Fatalf("the server's IP: %v", err)
	}
	if err := try("other.example"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a wrong name: %v", err)
	}
}

// TestClientCertificateRotation: the client presents the pair in force at
// each handshake.
func TestClientCertificateRotation(t *testing.T) {
	a, b := testpki.New(t), testpki.New(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.ClientCert, cert)
	copyFile(t, a.ClientKey, key)
	r, err := New(Files{Cert: cert, Key: key, Name: "client"}, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(a.ServerCert, a.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []byte, 4)
	l := serveTLS(t, &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAnyClientCert}, func(c *tls.Conn) {
		if c.Handshake() == nil {
			seen <- c.ConnectionState().PeerCertificates[0].Raw
		}
		_, _ = c.Write([]byte("x"))
	})
	presented := func() []byte {
		conf := r.ClientConfig("")
		conf.InsecureSkipVerify = true // this test is about the client's certificate
		c, err := tls.Dial("tcp", l.Addr().String(), conf)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Read(make([]byte, 1))
		return <-seen
	}
	clientLeaf := func(p *testpki.PKI) []byte {
		pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		return pair.Certificate[0]
	}
	if !bytes.Equal(presented(), clientLeaf(a)) {
		t.Fatal("not the first client certificate")
	}
	copyFile(t, b.ClientCert, cert)
	copyFile(t, b.ClientKey, key)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("rotation: %v %v", changed, err)
	}
	if !bytes.Equal(presented(), clientLeaf(b)) {
		t.Fatal("the rotated client certificate not presented")
	}
}

// serveTLS listens on a loopback port with conf and hands every connection
// to handle, each in a goroutine of its own, closing it after; the
// listener closes when the test ends.
func serveTLS(t *testing.T, conf *tls.Config, handle func(*tls.Conn)) net.Listener {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c.(*tls.Conn))
			}()
		}
	}()
	return l
}

// TestRotationRefusesACertificateOutsideItsValidity: a rotation to a pair
// that is expired (the clock a year on) or not yet valid (a year back)
// keeps the last good pair and logs why. Before, it was served and every
// new handshake failed. The control skips the check: the pair is loaded.
func TestRotationRefusesACertificateOutsideItsValidity(t *testing.T) {
	for _, shift := range []time.Duration{365 * 24 * time.Hour, -365 * 24 * time.Hour} {
		a, b := testpki.New(t), testpki.New(t)
		dir := t.TempDir()
		cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		copyFile(t, a.ServerCert, cert)
		copyFile(t, a.ServerKey, key)
		logs := &logBuffer{}
		r, err := New(Files{Cert: cert, Key: key, Name: "test"}, time.Minute, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeNow{t: time.Now().Add(shift)}
		r.now = clock.now
		copyFile(t, b.ServerCert, cert)
		copyFile(t, b.ServerKey, key)
		loaded, err := r.Check()
		if loaded || err == nil || !strings.Contains(err.Error(), "renew it") {
			t.Fatalf("shift %v: a pair outside its validity: loaded %v, err %v", shift, loaded, err)
		}
		if !bytes.Equal(r.Certificate().Certificate[0], leafOf(t, a.ServerCert)) {
			t.Fatalf("shift %v: the pair outside its validity replaced the good one", shift)
		}
		if logs.count("renew it") != 1 {
			t.Fatalf("shift %v: why was not logged once", shift)
		}

		skipValidity = true
		loaded, err = r.Check()
		skipValidity = false
		if !loaded || err != nil {
			t.Fatalf("shift %v: the control did not load the pair (%v, %v): the test cannot tell", shift, loaded, err)
		}
	}
}

// TestRenameSeenBeforeTheInterval: a pair renamed over the served files,
// and a Kubernetes ..data swap, are in force at the next handshake, not
// after the interval (an hour here; 10 s by default in limitkit-rls),
// the reference's TestReloadGRPCServerCerts case. The control waits for
// the interval: the old pair stays.
func TestRenameSeenBeforeTheInterval(t *testing.T) {
	for _, control := range []bool{false, true} {
		a, b := testpki.New(t), testpki.New(t)
		dir := t.TempDir()
		cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		copyFile(t, a.ServerCert, cert)
		copyFile(t, a.ServerKey, key)
		r, err := New(Files{Cert: cert, Key: key, Name: "test"}, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeNow{t: time.Now()}
		r.now = clock.now
		skipRenames = control
		// The new pair written aside, then renamed over the served names.
		copyFile(t, b.ServerKey, key+".new")
		copyFile(t, b.ServerCert, cert+".new")
		if err := os.Rename(key+".new", key); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cert+".new", cert); err != nil {
			t.Fatal(err)
		}
		got := bytes.Equal(r.Certificate().Certificate[0], leafOf(t, b.ServerCert))
		skipRenames = false
		if got == control {
			t.Fatalf("control %v: the renamed pair in force: %v", control, got)
		}
	}
}

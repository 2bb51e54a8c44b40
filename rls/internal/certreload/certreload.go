// Package certreload keeps a TLS certificate, its key and a CA bundle as
// the files say, for servers and clients that must pick up renewed
// certificates (cert-manager, Envoy Gateway) without a restart.
//
// A Reloader reads its files when made, and again when one is used and
// the last check is older than its interval, or a stat of the names finds
// another file, size or time behind one (a rename over it, a Kubernetes
// ..data swap: seen at the next handshake): the files' contents are
// compared with what was loaded, which sees in-place writes and the
// symbolic link swaps of Kubernetes secret volumes alike. A change that
// does not load (a certificate written before its key, a torn file, a
// certificate expired or not yet valid) keeps the last good material and
// is logged once, with why; the next check tries again.
//
// Only new TLS handshakes see new material; open connections keep theirs.
package certreload

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Files names what a Reloader loads. Cert and Key go together; CA may be
// alone or empty.
type Files struct {
	// Cert and Key are PEM files of a certificate chain and its key.
	Cert, Key string
	// CA is a PEM file of one or more CA certificates.
	CA string
	// Name names the files in errors and logs, such as
	// "GRPC_SERVER_TLS_CERT/KEY".
	Name string
}

// Reloader holds the material of Files, reloaded when the files change.
// It is safe for concurrent use.
type Reloader struct {
	files    Files
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time

	cur atomic.Pointer[material]
	// mu is held by the one goroutine checking the files.
	mu        sync.Mutex
	lastCheck atomic.Int64       // unix nanoseconds
	failed    *[sha256.Size]byte // the contents whose load failed, logged once
	// seen is what os.Stat said of the files at the last check.
	seen atomic.Pointer[[3]fileID]
}

// fileID is what a rename over a file (a certificate renewed by a new
// file, a Kubernetes secret's ..data symlink swap) changes: the file
// behind the name, its size or time.
type fileID struct {
	info os.FileInfo
}

// ids stats the files, following symbolic links; a file that cannot be
// stated has no info.
func (r *Reloader) ids() *[3]fileID {
	var out [3]fileID
	for i, path := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		if path != "" {
			out[i].info, _ = os.Stat(path)
		}
	}
	return &out
}

// renamed reports whether a file behind one of the names changed since
// the last check: a few stats, cheap beside the handshake they serve, so
// a rotation by rename is seen at once rather than after the interval.
func (r *Reloader) renamed() bool {
	seen := r.seen.Load()
	if seen == nil || skipRenames {
		return false
	}
	now := r.ids()
	for i := range now {
		a, b := seen[i].info, now[i].info
		if (a == nil) != (b == nil) || a != nil && (!os.SameFile(a, b) || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime())) {
			return true
		}
	}
	return false
}

// skipRenames waits for the interval whatever the files, as before
// renamed: a control.
var skipRenames = false

// material is one loaded set of files.
type material struct {
	sum  [sha256.Size]byte // of the files' contents, to see a change
	cert *tls.Certificate
	pool *x509.CertPool
}

// New loads files and returns a Reloader that checks them again at most
// once per interval. An error says which file does not load. log may be
// nil (no logs).
func New(files Files, interval time.Duration, log *slog.Logger) (*Reloader, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, fmt.Errorf("%s: set the certificate and the key together", files.Name)
	}
	if files.Cert == "" && files.CA == "" {
		return nil, fmt.Errorf("%s: no file to load", files.Name)
	}
	if interval <= 0 {
		return nil, fmt.Errorf("%s: reload interval %v: write a positive duration", files.Name, interval)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{files: files, interval: interval, log: log, now: time.Now}
	raw, err := r.read()
	if err != nil {
		return nil, err
	}
	m, err := r.load(raw)
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.lastCheck.Store(r.now().UnixNano())
	r.seen.Store(r.ids())
	return r, nil
}

// read returns the files' contents, joined with separators no PEM holds.
func (r *Reloader) read() ([]byte, error) {
	var all []byte
	for _, path := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		if path == "" {
			all = append(all, 0)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.files.Name, err)
		}
		all = append(append(all, b...), 0)
	}
	return all, nil
}

// load parses contents from read.
func (r *Reloader) load(raw []byte) (*material, error) {
	parts := bytes.SplitN(raw, []byte{0}, 4)
	if len(parts) < 3 {
		return nil, fmt.Errorf("%s: a file holds a NUL byte; write PEM", r.files.Name)
	}
	m := &material{sum: sha256.Sum256(raw)}
	if r.files.Cert != "" {
		pair, err := tls.X509KeyPair(parts[0], parts[1])
		if err != nil {
			return nil, fmt.Errorf("%s (%s, %s): %w", r.files.Name, r.files.Cert, r.files.Key, err)
		}
		m.cert = &pair
	}
	if r.files.CA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(parts[2]) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", r.files.Name, r.files.CA)
		}
		m.pool = pool
	}
	return m, nil
}

// current returns the material in force, checking the files first when
// the last check is older than the interval. Only one caller checks; the
// others go on with what is loaded.
func (r *Reloader) current() *material {
	now := r.now()
	if (now.UnixNano()-r.lastCheck.Load() >= int64(r.interval) || r.renamed()) && r.mu.TryLock() {
		r.check(now)
		r.mu.Unlock()
	}
	return r.cur.Load()
}

// Check reads the files now, whatever the interval, and reports whether
// new material was loaded. An error says why a change did not load; the
// last good material stays.
func (r *Reloader) Check() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.check(r.now())
}

// check is Check with mu held.
func (r *Reloader) check(now time.Time) (bool, error) {
	r.lastCheck.Store(now.UnixNano())
	r.seen.Store(r.ids())
	raw, err := r.read()
	sum := sha256.Sum256(raw) // a file that cannot be read sums as no contents
	if err == nil && sum == r.cur.Load().sum {
		return false, nil
	}
	var m *material
	if err == nil {
		m, err = r.load(raw)
	}
	if err == nil && !skipValidity {
		err = r.valid(m, now)
	}
	if err != nil {
		if r.failed == nil || *r.failed != sum { // once per contents
			r.failed = &sum
			r.log.Error("TLS files changed but do not load; the previous certificate stays in use", "files", r.files.Name, "err", err)
		}
		return false, err
	}
	r.failed = nil
	r.cur.Store(m)
	r.log.Info("TLS files reloaded", "files", r.files.Name)
	return true, nil
}

// skipValidity lets a rotation load a certificate outside its validity,
// as before valid: a control.
var skipValidity = false

// valid refuses a rotation to a certificate that is expired or not yet
// valid at now: served, every new handshake would fail, while the
// previous one may still be good.
func (r *Reloader) valid(m *material, now time.Time) error {
	if m.cert == nil {
		return nil
	}
	leaf := m.cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(m.cert.Certificate[0]); err != nil {
			return fmt.Errorf("%s: %s: %w", r.files.Name, r.files.Cert, err)
		}
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("%s: %s is valid from %s to %s, not now (%s); renew it",
			r.files.Name, r.files.Cert, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// Certificate returns the certificate in force; nil without Files.Cert.
func (r *Reloader) Certificate() *tls.Certificate { return r.current().cert }

// Pool returns the CA pool in force; nil without Files.CA.
func (r *Reloader) Pool() *x509.CertPool { return r.current().pool }

// ServerConfig returns a server's tls.Config whose certificate comes from
// r and, when r has a CA, that requires client certificates signed by it.
// verify, when not nil, runs on the verified client chains (a SAN check).
func (r *Reloader) ServerConfig(verify func(chains [][]*x509.Certificate) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
			if m.cert != nil {
				c.Certificates = []tls.Certificate{*m.cert}
			}
			if m.pool != nil {
				c.ClientCAs, c.ClientAuth = m.pool, tls.RequireAndVerifyClientCert
			}
			if verify != nil {
				c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error { return verify(chains) }
			}
			return c, nil
		},
	}
}

// ClientConfig returns a client's tls.Config that presents r's
// certificate, if any, and verifies the server against r's CA, if any
// (the system's roots otherwise), under serverName: the name the
// server's certificate must carry, and the SNI sent.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if r.files.Cert != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		}
	}
	if r.files.CA != "" {
		// The roots change with the file, so the chain is verified here
		// against the pool in force rather than by a fixed RootCAs.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, r.current().pool, serverName)
		}
	}
	return c
}

// verifyServer verifies the server's chain against roots and its name,
// as crypto/tls does with RootCAs.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	name := serverName
	if name == "" {
		name = cs.ServerName
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: name,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("the server's certificate: %w", err)
	}
	return nil
}

// HasSAN reports whether the leaf of one of chains carries san as a DNS
// name, URI, IP address or e-mail address.
func HasSAN(chains [][]*x509.Certificate, san string) bool {
	for _, chain := range chains {
		if len(chain) == 0 {
			continue
		}
		leaf := chain[0]
		if slices.Contains(leaf.DNSNames, san) || slices.Contains(leaf.EmailAddresses, san) {
			return true
		}
		for _, u := range leaf.URIs {
			if u.String() == san {
				return true
			}
		}
		for _, ip := range leaf.IPAddresses {
			if ip.String() == san {
				return true
			}
		}
	}
	return false
}

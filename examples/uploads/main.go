// Command uploads shows a concurrency limit: at most 2 uploads in flight
// per user, over a real HTTP server on a loopback port, with the
// limiter/httplimit middleware holding a lease for each upload from when it
// is admitted until its handler returns.
//
//	go run ./examples/uploads
//	go run ./examples/uploads -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// A third upload while two are in flight is refused with 429 and the
// draft's concurrent-requests fields. Then a worker crashes while holding a
// lease (it acquired one and never released it): its slot stays taken
// until the lease times out, 30 s later, and then comes back by itself.
// The limiter runs on a simulated clock, so the program prints the same
// thing every time and the 30 s pass at once.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db; rediss://, redis+cluster://, redis+sentinel:// as backend/storeurl reads them); empty keeps the state in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.Parse()
	store, where, closeStore, err := openStore(*redisURL, *client)
	if err == nil {
		defer closeStore()
		fmt.Printf("uploads: state %s\n", where)
		err = run(os.Stdout, store)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "uploads:", err)
		os.Exit(1)
	}
}

// The limit: 2 uploads in flight per user; a lease not released within 30 s
// (its holder crashed or hung) times out.
const (
	inFlight     = 2
	leaseTimeout = 30 * time.Second
)

// service is the upload endpoint, POST /upload with the user in X-User and
// the file's name in X-File. An upload stays in its handler until the
// program finishes it (finish), as a slow upload would.
type service struct {
	mu       sync.Mutex
	finish   map[string]chan struct{} // by file name
	admitted chan string              // "name slots-left", when a handler starts
}

// end lets the upload of name finish, if it has not.
func (s *service) end(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.finish[name]; ok {
		close(c)
		delete(s.finish, name)
	}
}

// endAll lets every upload finish, so that the server can close.
func (s *service) endAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range s.finish {
		close(c)
		delete(s.finish, name)
	}
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.Header.Get("X-File")
	d, _ := httplimit.DecisionFrom(r.Context())
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	done, ok := s.finish[name]
	s.mu.Unlock()
	s.admitted <- fmt.Sprintf("%d", d.Remaining)
	if ok {
		<-done
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, "stored %s\n", name)
}

// demo drives the server and prints what happens, on the simulated clock.
type demo struct {
	out   io.Writer
	srv   *httptest.Server
	svc   *service
	clock *clock.Fake
	ended map[string]chan string // by file name: the response line
}

func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, d.clock.Now().Format("15:04:05")+" "+format+"\n", args...)
}

// upload starts an upload and returns once it is in its handler or
// refused.
func (d *demo) upload(user, name string) {
	d.svc.mu.Lock()
	d.svc.finish[name] = make(chan struct{})
	d.svc.mu.Unlock()
	ended := make(chan string, 1)
	d.ended[name] = ended
	refused := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, d.srv.URL+"/upload", strings.NewReader("...file bytes..."))
		req.Header.Set("X-User", user)
		req.Header.Set("X-File", name)
		resp, err := d.srv.Client().Do(req)
		if err != nil {
			refused <- "error: " + err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		line := fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusTooManyRequests {
			refused <- fmt.Sprintf("429 refused (RateLimit-Policy: %s; RateLimit: %s; Retry-After: %s)",
				resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
			return
		}
		ended <- line
	}()
	select {
	case left := <-d.svc.admitted:
		d.printf("%-4s %-6s admitted, uploading (slots left: %s)", user, name, left)
	case line := <-refused:
		d.printf("%-4s %-6s %s", user, name, line)
	}
}

// finish ends an upload and waits for its response: its lease has been
// released by then.
func (d *demo) finish(user, name string) {
	d.svc.end(name)
	d.printf("%-4s %-6s %s; its slot is free again", user, name, <-d.ended[name])
}

func run(out io.Writer, store backend.Store) error {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC))
	lim, err := limiter.New(store, limiter.Config{
		Algorithm: algorithms.Concurrency, Limit: inFlight, Window: leaseTimeout, Prefix: "example:uploads:",
	}, limiter.WithClock(fake))
	if err != nil {
		return err
	}
	for _, user := range []string{"ann", "bob"} {
		if err := lim.Reset(ctx, user); err != nil { // a fresh start on a shared Redis
			return err
		}
	}
	mw, err := httplimit.New(lim, httplimit.WithKey(httplimit.Header("X-User")), httplimit.WithPolicyName("uploads"))
	if err != nil {
		return err
	}
	svc := &service{finish: map[string]chan struct{}{}, admitted: make(chan string, 16)}
	srv := httptest.NewServer(mw.Handler(svc)) // a real server on 127.0.0.1
	defer srv.Close()
	defer svc.endAll() // before Close, which waits for the handlers
	d := &demo{out: out, srv: srv, svc: svc, clock: fake, ended: map[string]chan string{}}

	fmt.Fprintf(out, "at most %d uploads in flight per user; a lease not released times out after %v\n", inFlight, leaseTimeout)
	d.upload("ann", "a.jpg")
	d.upload("ann", "b.jpg")
	fake.Advance(time.Second)
	d.upload("ann", "c.jpg")
	d.upload("bob", "d.jpg") // bob has his own 2
	fake.Advance(time.Second)
	d.finish("ann", "a.jpg")
	d.upload("ann", "c.jpg")
	fake.Advance(time.Second)
	for _, f := range [][2]string{{"ann", "b.jpg"}, {"ann", "c.jpg"}, {"bob", "d.jpg"}} {
		d.finish(f[0], f[1])
	}

	fmt.Fprintln(out, "-- a worker takes one of ann's slots and crashes without releasing it")
	fake.Advance(time.Second)
	if _, dec, err := lim.Acquire(ctx, "ann"); err != nil || !dec.Allowed {
		return fmt.Errorf("worker's lease: allowed %v, %v", dec.Allowed, err)
	}
	d.printf("ann  worker holds a lease and dies (no Release): it expires at %s", fake.Now().Add(leaseTimeout).Format("15:04:05"))
	d.upload("ann", "e.jpg")
	d.upload("ann", "f.jpg")
	fake.Advance(10 * time.Second)
	d.finish("ann", "e.jpg")
	d.upload("ann", "f.jpg")
	d.upload("ann", "g.jpg")
	d.finish("ann", "f.jpg")

	fmt.Fprintln(out, "-- 30 s after the crash, the dead worker's lease times out")
	fake.Advance(20 * time.Second)
	d.upload("ann", "g.jpg")
	d.upload("ann", "h.jpg")
	d.finish("ann", "g.jpg")
	d.finish("ann", "h.jpg")
	return nil
}

// openStore opens the store the example keeps its state in: a memory store
// when redisURL is empty, else the Redis at redisURL (any URL
// backend/storeurl reads: one server, a cluster, Sentinel) through the
// client library named, go-redis or rueidis. It returns where the state
// is, and a function that closes the store.
func openStore(redisURL, client string) (backend.Store, string, func(), error) {
	url, where := "memory://", "in memory"
	if redisURL != "" {
		url, where = redisURL, "in Redis ("+client+")"
	}
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, "", nil, err
	}
	return opened.Store, where, func() { _ = opened.Close() }, nil
}

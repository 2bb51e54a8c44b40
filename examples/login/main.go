// Command login shows how to limit failed logins per account and per client
// IP address, and how a successful login forgives the account.
//
//	go run ./examples/login
//	go run ./examples/login -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// Two limits guard the password check, decided together by a
// limiter.Composite (all or nothing: a blocked attempt counts against
// neither):
//
//   - per account: 5 attempts per 15 minutes, whoever makes them, against
//     guessing one user's password from many addresses;
//   - per IP address: 20 attempts per hour, whichever accounts they name,
//     against one address spraying a common password over many accounts.
//
// Each attempt is counted before the password is checked, in one atomic
// step, so even concurrent guesses never get more password checks than the
// limits allow. A successful login resets the account's count (not the
// address's: one known password must not buy an attacker more guesses).
//
// It uses a simulated clock, so it prints the same thing every time.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db; rediss://, redis+cluster://, redis+sentinel:// as backend/storeurl reads them); empty keeps the state in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.Parse()
	store, where, closeStore, err := openStore(*redisURL, *client)
	if err == nil {
		defer closeStore()
		err = run(os.Stdout, store, where)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "login:", err)
		os.Exit(1)
	}
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

// The limits, by their index in the Composite.
const (
	perAccount = 0
	perIP      = 1
)

// loginGuard decides whether a login attempt may check its password.
type loginGuard struct {
	attempts *limiter.Composite // keys: account, IP address
	accounts *limiter.Limiter   // the per-account limit alone, to forgive an account
}

func newLoginGuard(store backend.Store, prefix string, clk clock.Clock) (*loginGuard, error) {
	account := limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 5, Window: 15 * time.Minute, Prefix: prefix + "account:"}
	ip := limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 20, Window: time.Hour, Prefix: prefix + "ip:"}
	attempts, err := limiter.NewComposite(store, []limiter.Config{perAccount: account, perIP: ip}, limiter.WithClock(clk))
	if err != nil {
		return nil, err
	}
	// The same Config on the same store is the same counter: Reset on it
	// clears the account's count and leaves the address's alone
	// (Composite.Reset would clear both).
	accounts, err := limiter.New(store, account, limiter.WithClock(clk))
	if err != nil {
		return nil, err
	}
	return &loginGuard{attempts: attempts, accounts: accounts}, nil
}

// users are the demo's accounts and their passwords (a real service
// compares password hashes).
var users = map[string]string{"alice": "correct horse", "bob": "battery staple"}

// login counts the attempt, then checks the password, and says what the
// user would be told.
func (g *loginGuard) login(ctx context.Context, account, ip, password string) (string, error) {
	d, err := g.attempts.Allow(ctx, account, ip)
	if err != nil {
		return "", err // the store failed: decide by policy (here: report it)
	}
	if !d.Allowed {
		who := "this account"
		if d.Rule == perIP {
			who = "this address"
		}
		return fmt.Sprintf("blocked: too many login attempts for %s; retry in %v", who, d.RetryAfter), nil
	}
	if want, ok := users[account]; !ok || want != password {
		return "wrong password (" + left(d.Remaining) + ")", nil
	}
	if err := g.accounts.Reset(ctx, account); err != nil {
		return "", err
	}
	return "welcome; the account's count is reset", nil
}

func run(out io.Writer, store backend.Store, where string) error {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	// A fresh prefix per run, so that a Redis store starts empty each time.
	prefix := "login-example:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	g, err := newLoginGuard(store, prefix, fake)
	if err != nil {
		return err
	}
	attempt := func(account, ip, password string) error {
		msg, err := g.login(ctx, account, ip, password)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  t=%-6s %-6s from %-14s %s\n", fake.Now().Sub(start), account, ip, msg)
		return nil
	}

	fmt.Fprintln(out, "Login limits: 5 attempts per account per 15m, 20 per IP address per hour.")
	fmt.Fprintf(out, "The clock is simulated; the counts are %s.\n", where)

	fmt.Fprintln(out, "\n1. alice mistypes twice, then logs in: her count starts over.")
	for _, pw := range []string{"correct hose", "correct horse!", "correct horse", "oops"} {
		if err := attempt("alice", "192.0.2.10", pw); err != nil {
			return err
		}
		fake.Advance(5 * time.Second)
	}

	fmt.Fprintln(out, "\n2. Someone guesses bob's password from 203.0.113.7.")
	fake.Set(start.Add(time.Minute))
	for i := range 7 {
		if err := attempt("bob", "203.0.113.7", "guess"+strconv.Itoa(i)); err != nil {
			return err
		}
		fake.Advance(time.Second)
	}
	fmt.Fprintln(out, "   bob himself, with the right password, waits too: the limit is on the account.")
	fake.Set(start.Add(2 * time.Minute))
	if err := attempt("bob", "192.0.2.44", users["bob"]); err != nil {
		return err
	}
	fake.Set(start.Add(17 * time.Minute))
	if err := attempt("bob", "192.0.2.44", users["bob"]); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n3. 198.51.100.9 tries one common password on 25 accounts.")
	checked, blocked := 0, 0
	var last string
	for i := 1; i <= 25; i++ {
		msg, err := g.login(ctx, fmt.Sprintf("user%02d", i), "198.51.100.9", "123456")
		if err != nil {
			return err
		}
		if strings.HasPrefix(msg, "blocked:") {
			blocked++
			last = msg
		} else {
			checked++
		}
	}
	fmt.Fprintf(out, "  %d passwords checked, %d attempts refused by the per-address limit\n", checked, blocked)
	fmt.Fprintf(out, "  the last one: %s\n", last)
	return nil
}

func left(n int64) string {
	switch n {
	case 0:
		return "no attempts left"
	case 1:
		return "1 attempt left"
	}
	return strconv.FormatInt(n, 10) + " attempts left"
}

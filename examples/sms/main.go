// Command sms shows how to limit the verification codes sent to a phone
// number: at most one every 30 seconds, and at most 5 a day.
//
//	go run ./examples/sms
//	go run ./examples/sms -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// Every SMS costs money and a flood of them harasses the number's owner,
// so both limits apply to the phone number, whoever asks: the 30-second
// limit stops impatient resends, and a guard (a second, independent limit
// on the same key) caps the day at 5. Both use the exact sliding log, so
// "a day" is any 24 hours, not a calendar day an attacker could straddle.
// With -redis the store is wrapped in a fallback store (package fallback)
// and both limits fail closed: while Redis is down no code is sent, rather
// than an unlimited number.
//
// Numbers are normalised before they become keys: "+44 7700 900123" and
// "+447700900123" are one phone, and must be one key.
//
// It uses a simulated clock, so it prints the same thing every time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
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
		fmt.Fprintln(os.Stderr, "sms:", err)
		os.Exit(1)
	}
}

// openStore returns the store to keep the counts in, where that is, and a
// function that closes it: a memory store when redisURL is empty, else the
// Redis at redisURL (any URL backend/storeurl reads) through the client
// library named, go-redis or rueidis, behind a fallback store that goes on
// limiting while Redis is down.
func openStore(redisURL, client string) (backend.Store, string, func(), error) {
	if redisURL == "" {
		s, err := memorystore.New()
		return s, "in memory", func() {}, err
	}
	opened, err := storeurl.Open(context.Background(), redisURL, storeurl.WithClient(client))
	if err != nil {
		return nil, "", nil, err
	}
	closeStore := func() { _ = opened.Close() }
	fb, err := fallback.New(opened.Store)
	if err != nil {
		closeStore()
		return nil, "", nil, err
	}
	return fb, "in Redis (" + client + ")", closeStore, nil
}

// codeLimit is the limit on verification codes per phone number.
func codeLimit(prefix string) limiter.Config {
	return limiter.Config{
		Algorithm: algorithms.SlidingLog,
		Limit:     1,
		Window:    30 * time.Second,
		Prefix:    prefix,
		OnFailure: backend.FailClosed,
		Guard: &limiter.Guard{
			Algorithm: algorithms.SlidingLog,
			Limit:     5,
			Window:    24 * time.Hour,
			OnFailure: backend.FailClosed,
		},
	}
}

// errBadNumber reports a phone number that cannot be a key.
var errBadNumber = errors.New("not a phone number")

// normalize returns number in E.164 form (+ and digits only), so that every
// way of writing one number gives one key.
func normalize(number string) (string, error) {
	var b strings.Builder
	for i, r := range strings.TrimSpace(number) {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '+' && i == 0:
			b.WriteRune(r)
		case r == ' ' || r == '-' || r == '(' || r == ')' || r == '.':
		default:
			return "", fmt.Errorf("%w: %q", errBadNumber, number)
		}
	}
	s := b.String()
	if !strings.HasPrefix(s, "+") || len(s) < 9 || len(s) > 16 {
		return "", fmt.Errorf("%w: %q (write it with its country code, such as +44 7700 900123)", errBadNumber, number)
	}
	return s, nil
}

// sender sends verification codes within the limits.
type sender struct {
	lim *limiter.Limiter
}

// send decides whether a code may go to number and says what the user
// would be told.
func (s *sender) send(ctx context.Context, number string) (string, error) {
	key, err := normalize(number)
	if err != nil {
		return "refused: " + err.Error(), nil
	}
	d, err := s.lim.Allow(ctx, key)
	if err != nil {
		return "", err
	}
	switch {
	case d.Allowed:
		return "code sent to " + key, nil // a real service sends the SMS here
	case d.Degraded:
		return fmt.Sprintf("refused: codes cannot be counted right now; try again in %v", d.RetryAfter), nil
	case d.Rule == limiter.GuardRule:
		return fmt.Sprintf("refused: 5 codes a day; next in %v", d.RetryAfter), nil
	default:
		return fmt.Sprintf("refused: wait %v before asking again", d.RetryAfter), nil
	}
}

func run(out io.Writer, store backend.Store, where string) error {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	// A fresh prefix per run, so that a Redis store starts empty each time.
	prefix := "sms-example:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	lim, err := limiter.New(store, codeLimit(prefix), limiter.WithClock(fake))
	if err != nil {
		return err
	}
	s := &sender{lim: lim}
	fmt.Fprintln(out, "Verification codes: 1 per 30s and 5 per 24h for each phone number.")
	fmt.Fprintf(out, "The clock is simulated; the counts are %s.\n\n", where)
	for _, step := range []struct {
		at     time.Duration
		number string
	}{
		{0, "+44 7700 900123"},
		{10 * time.Second, "+44 7700 900123"},
		{30 * time.Second, "+447700900123"},
		{31 * time.Second, "+44-7700-900-123"},
		{2 * time.Minute, "+44 7700 900123"},
		{5 * time.Minute, "+44 7700 900123"},
		{10 * time.Minute, "+44 7700 900123"},
		{15 * time.Minute, "+44 7700 900123"},
		{15 * time.Minute, "+1 202 555 0143"},
		{15 * time.Minute, "call me maybe"},
		{24 * time.Hour, "+44 7700 900123"},
	} {
		fake.Set(start.Add(step.at))
		msg, err := s.send(ctx, step.number)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  t=%-8v %-20s %s\n", step.at, step.number, msg)
	}
	return nil
}

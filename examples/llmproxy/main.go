// Command llmproxy is a reverse proxy in front of an OpenAI-compatible API
// that counts each API key's tokens: the cost of a request known only when
// its response (or its stream) ends.
//
//	go run ./examples/llmproxy
//	go run ./examples/llmproxy -redis redis://127.0.0.1:6379/0 [-client rueidis]
//
// It starts a fake upstream (streamed completions as server-sent events
// ending with a usage chunk and "data: [DONE]", and plain JSON ones with
// their usage) and the proxy on loopback, drives a short load through it
// with two API keys (Authorization: Bearer), and prints what each key was admitted,
// refused and used. The proxy streams each chunk to the client as it comes. A request
// is estimated before it is forwarded (its max_tokens, which the upstream
// is told to stop at, plus a bound of its prompt) and costs its usage when
// the response ends; a stream aborted before its usage costs its estimate
// (see docs/tokens.md).
//
// Each key has a budget of 1000 tokens a minute: the request reserves its
// estimate (httplimit.NewCost over limiter.Limiter.ReserveN), refused with
// 429 when it does not fit, and settles its usage when it ends, giving back
// what it did not use. With estimates at least the costs, no budget is
// ever overspent, however many requests are in flight.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db); empty keeps the budgets in memory")
	client := flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.Parse()
	store, where, closeStore, err := openStore(*redisURL, *client)
	if err == nil {
		defer closeStore()
		fmt.Printf("Budgets %s.\n", where)
		err = run(os.Stdout, store, estimate)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmproxy:", err)
		os.Exit(1)
	}
}

// The budget: tokens per minute per API key.
const (
	budget = 1000
	window = time.Minute
)

// openStore opens the store the budgets are kept in: memory when redisURL
// is empty, else the Redis at redisURL (any URL backend/storeurl reads)
// through the client library named, go-redis or rueidis. It returns where
// the budgets are, and a function that closes the store.
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

// meter adds up the tokens each key's responses cost.
type meter struct {
	mu     sync.Mutex
	tokens map[string]int64
}

func (m *meter) report(_ context.Context, key string, tokens int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[key] += tokens
}

// snapshot copies the counts.
func (m *meter) snapshot() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.tokens)
}

// app is the fake upstream and the proxy in front of it, on loopback.
type app struct {
	upstream, proxy *httptest.Server
	meter           *meter
}

// newApp starts the fake upstream and, in front of it, the proxy with a
// budget per API key on store: each request reserves what est says
// (estimate, in the proxy) and settles on its usage.
func newApp(store backend.Store, est func(*http.Request) (int64, error)) (*app, error) {
	// A fixed clock keeps the demo in one window; a fresh prefix, a fresh
	// run on a shared Redis.
	lim, err := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: budget, Window: window,
		Prefix: "llm:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"},
		limiter.WithClock(clock.NewFake(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))))
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.NewCost(lim, httplimit.Cost{Estimate: est},
		httplimit.WithKey(func(r *http.Request) httplimit.Key { return httplimit.Key{Value: apiKey(r)} }),
		httplimit.WithPolicyName("tokens"),
		httplimit.WithMissingKey(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "401 unauthorized: send Authorization: Bearer <API key>", http.StatusUnauthorized)
		})))
	if err != nil {
		return nil, err
	}
	up := httptest.NewServer(upstream())
	target, err := url.Parse(up.URL)
	if err != nil {
		up.Close()
		return nil, err
	}
	m := &meter{tokens: map[string]int64{}}
	p := proxy(target, func(ctx context.Context, key string, tokens int64) {
		httplimit.ReportCost(ctx, tokens) // settled when the handler returns
		m.report(ctx, key, tokens)
	})
	return &app{upstream: up, proxy: httptest.NewServer(mw.Handler(p)), meter: m}, nil
}

func (a *app) close() {
	a.proxy.Close()
	a.upstream.Close()
}

// complete sends one chat completion for key and reads the whole response.
func (a *app) complete(ctx context.Context, key, prompt string, maxTokens int, stream bool) (int, []byte, error) {
	body := fmt.Sprintf(`{"model":"fake","messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`, prompt, maxTokens, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.proxy.URL+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.proxy.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// run drives the demo load through the proxy on store, with requests
// estimated by est, and prints what each key was admitted, refused and
// used; it returns an error when a budget was overspent.
func run(out io.Writer, store backend.Store, est func(*http.Request) (int64, error)) error {
	a, err := newApp(store, est)
	if err != nil {
		return err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Fprintf(out, "Budget: %d tokens per %v per API key. 2 keys, 16 concurrent requests each (max_tokens 100 to 250, half streamed).\n", budget, window)
	names := map[string]string{}
	var mu sync.Mutex
	admitted, refused := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for _, key := range []string{"sk-alice", "sk-bob"} {
		names[apiKey(&http.Request{Header: http.Header{"Authorization": {"Bearer " + key}}})] = key
		for i := range 16 {
			wg.Go(func() {
				code, _, err := a.complete(ctx, key, fmt.Sprintf("Question %d: say something.", i), 100+10*i, i%2 == 0)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && code == http.StatusOK:
					admitted[key]++
				case err == nil && code == http.StatusTooManyRequests:
					refused[key]++
				}
			})
		}
	}
	wg.Wait()
	// A response is settled once its handler has closed the upstream's
	// body, which can be after the client read its end: Close waits.
	a.proxy.Close()
	used := a.meter.snapshot()
	over := false
	for _, k := range slices.Sorted(maps.Keys(used)) {
		name := names[k]
		fmt.Fprintf(out, "key %s: %d admitted, %d refused, %d tokens used of %d\n", name, admitted[name], refused[name], used[k], budget)
		over = over || used[k] > budget
	}
	if over {
		return fmt.Errorf("a budget was overspent: the estimates were below the costs")
	}
	fmt.Fprintln(out, "No budget overspent: each request reserved at least what it cost.")
	return nil
}

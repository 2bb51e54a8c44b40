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
// with two API keys (Authorization: Bearer), and prints the tokens each key
// used. The proxy streams each chunk to the client as it comes. A request
// is estimated before it is forwarded (its max_tokens, which the upstream
// is told to stop at, plus a bound of its prompt) and costs its usage when
// the response ends; a stream aborted before its usage costs its estimate
// (see docs/tokens.md).
//
// The tokens-per-minute budget per key reserves the estimate and settles
// the usage (httplimit's cost middleware over limiter.Limiter.ReserveN);
// it is wired in once the limiter has ReserveN.
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
	"sort"
	"sync"
	"time"
)

func main() {
	flag.String("redis", "", "Redis URL (redis://host:port/db); empty keeps the budgets in memory")
	flag.String("client", "go-redis", "Redis client library: go-redis or rueidis")
	flag.Parse()
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "llmproxy:", err)
		os.Exit(1)
	}
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

func newApp() (*app, error) {
	up := httptest.NewServer(upstream())
	target, err := url.Parse(up.URL)
	if err != nil {
		up.Close()
		return nil, err
	}
	m := &meter{tokens: map[string]int64{}}
	p := proxy(target, m.report)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiKey(r) == "" {
			http.Error(w, "401 unauthorized: send Authorization: Bearer <API key>", http.StatusUnauthorized)
			return
		}
		if _, err := estimate(r); err != nil {
			http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		p.ServeHTTP(w, r)
	}))
	return &app{upstream: up, proxy: front, meter: m}, nil
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

// run drives the demo load and prints what each key used.
func run(out io.Writer) error {
	a, err := newApp()
	if err != nil {
		return err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	names := map[string]string{}
	for _, key := range []string{"sk-alice", "sk-bob"} {
		names[apiKey(&http.Request{Header: http.Header{"Authorization": {"Bearer " + key}}})] = key
		for i := range 8 {
			wg.Go(func() {
				_, _, _ = a.complete(ctx, key, "Say something.", 40+10*i, i%2 == 0)
			})
		}
	}
	wg.Wait()
	// A response is counted once its handler has closed the upstream's
	// body, which can be after the client read its end: Close waits.
	a.proxy.Close()
	keys := make([]string, 0, len(a.meter.tokens))
	a.meter.mu.Lock()
	for k := range a.meter.tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "key %s: %d tokens\n", names[k], a.meter.tokens[k])
	}
	a.meter.mu.Unlock()
	return nil
}

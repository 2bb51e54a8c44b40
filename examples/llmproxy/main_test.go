package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// sseBody is a stream as the fake upstream writes it.
func sseBody(t *testing.T, u Usage) string {
	t.Helper()
	rec := httptest.NewRecorder()
	stream(rec, httptest.NewRequest(http.MethodPost, "/", nil), u, false)
	return rec.Body.String()
}

// oneByte reads one byte at a time: every split of a line.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func readUsage(t *testing.T, body io.Reader, contentType string) *Usage {
	t.Helper()
	var got *Usage
	calls := 0
	r := newUsageReader(io.NopCloser(body), contentType, func(u *Usage) { got = u; calls++ })
	_, err := io.Copy(io.Discard, r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
	require.Equal(t, 1, calls, "reported once")
	return got
}

// TestUsageReader: the usage chunk is found however the stream is split,
// the "usage":null of the other chunks is not taken for one, and a JSON
// body's usage is found; a stream cut before its usage reports none.
func TestUsageReader(t *testing.T) {
	u := Usage{PromptTokens: 12, CompletionTokens: 30, TotalTokens: 42}
	body := sseBody(t, u)
	require.Equal(t, 4+2, strings.Count(body, "data: "), body) // 4 chunks of 8, usage, [DONE]
	assert.Equal(t, &u, readUsage(t, strings.NewReader(body), "text/event-stream"))
	assert.Equal(t, &u, readUsage(t, oneByte{strings.NewReader(strings.ReplaceAll(body, "\n", "\r\n"))}, "text/event-stream; charset=utf-8"))
	cut := body[:strings.Index(body, `"usage":{`)]
	assert.Nil(t, readUsage(t, strings.NewReader(cut), "text/event-stream"), "usage:null is no usage")
	assert.Nil(t, readUsage(t, strings.NewReader(`data: {"usage":`+strings.Repeat(" ", maxLine)+`{"total_tokens":1}}`+"\n"), "text/event-stream"), "a line too long is not parsed")

	json := `{"object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	assert.Equal(t, int64(7), readUsage(t, oneByte{strings.NewReader(json)}, "application/json").Total())
	// The control: the same body read as a stream has no data: line.
	assert.Nil(t, readUsage(t, strings.NewReader(json), "text/event-stream"))
}

// TestEstimateBounds: the estimate is at least what the upstream counts,
// for random prompts and max_tokens; without its prompt part (the
// control) it is below.
func TestEstimateBounds(t *testing.T) {
	a, err := newApp(memStore(t), estimate)
	require.NoError(t, err)
	defer a.close()
	rng := rand.New(rand.NewPCG(1, 2))
	below := 0
	for i := range 50 {
		prompt := strings.Repeat("word ", rng.IntN(200))
		maxTokens := rng.IntN(300)
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`, prompt, maxTokens, i%2 == 0)
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		est, err := estimate(req)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		upstream().ServeHTTP(rec, req) // the rewritten body
		u := readUsage(t, rec.Body, rec.Header().Get("Content-Type"))
		require.NotNil(t, u, "request %d: the upstream reported its usage", i)
		assert.LessOrEqual(t, u.Total(), est, "request %d", i)
		completion := int64(maxTokens)
		if completion == 0 {
			completion = defaultMaxTokens
		}
		if completion < u.Total() {
			below++
		}
	}
	assert.Positive(t, below, "the control: max_tokens alone falls short")

	_, err = estimate(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"max_tokens":-1}`)))
	assert.ErrorContains(t, err, "negative")
	_, err = estimate(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`[1]`)))
	assert.ErrorContains(t, err, "not a JSON object")
}

// TestProxyStreams: through the proxy on loopback, a stream reaches the
// client chunk by chunk (the first chunk of a stalled stream arrives while
// the upstream still holds the rest), the meter counts each response's
// usage, and a stream aborted before its usage costs its estimate.
func TestProxyStreams(t *testing.T) {
	a, err := newApp(memStore(t), estimate)
	require.NoError(t, err)
	defer a.close()
	code, body, err := a.complete(t.Context(), "sk-1", "Say something.", 40, true)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Contains(t, string(body), `"usage":{"prompt_tokens":4,"completion_tokens":21,"total_tokens":25}`) // 40 less 48% (4*37%50)
	assert.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"))
	code, _, err = a.complete(t.Context(), "sk-1", "Say something.", 40, false)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	// The aborted stream: read the first chunk, then go away.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.proxy.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"stall"}],"max_tokens":64,"stream":true}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-2")
	resp, err := a.proxy.Client().Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, `"delta"`)
	cancel()
	_ = resp.Body.Close()
	a.proxy.Close() // waits for the proxy's handlers, and so the report
	counts := a.meter.snapshot()
	key := apiKey(&http.Request{Header: http.Header{"Authorization": {"Bearer sk-1"}}})
	assert.Equal(t, int64(50), counts[key], "two usages of 25")
	key2 := apiKey(&http.Request{Header: http.Header{"Authorization": {"Bearer sk-2"}}})
	assert.Greater(t, counts[key2], int64(64), "the estimate: max_tokens and the prompt's bound")
	assert.Len(t, counts, 2)
}

func memStore(t *testing.T) backend.Store {
	t.Helper()
	store, _, closeStore, err := openStore("", "")
	require.NoError(t, err)
	t.Cleanup(closeStore)
	return store
}

// TestDemo: on every store, the demo's budgets refuse some requests and
// are never overspent; the control, estimates of 1 token (below every
// cost), overspends them and run says so.
func TestDemo(t *testing.T) {
	exampletest.EveryStore(t, openStore, func(t *testing.T, store backend.Store, _ string) {
		var out strings.Builder
		require.NoError(t, run(&out, store, estimate))
		text := out.String()
		lines := regexp.MustCompile(`key (sk-\w+): (\d+) admitted, (\d+) refused, (\d+) tokens used of 1000`).FindAllStringSubmatch(text, -1)
		require.Len(t, lines, 2, text)
		for _, l := range lines {
			admitted, _ := strconv.Atoi(l[2])
			refused, _ := strconv.Atoi(l[3])
			used, _ := strconv.Atoi(l[4])
			assert.Equal(t, 16, admitted+refused, l[0])
			assert.Positive(t, refused, l[0])
			assert.LessOrEqual(t, used, 1000, l[0])
			assert.Greater(t, used, 500, "the budget is used: %s", l[0])
		}
		assert.Contains(t, text, "No budget overspent")

		out.Reset()
		under := func(r *http.Request) (int64, error) {
			_, err := estimate(r)
			return 1, err
		}
		assert.ErrorContains(t, run(&out, store, under), "overspent", out.String())
	})
}

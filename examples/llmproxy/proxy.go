package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// defaultMaxTokens is the completion the proxy reserves, and asks the
// upstream to stop at, for a request that names no max_tokens.
const defaultMaxTokens = 256

// maxBody bounds a request body the proxy reads.
const maxBody = 1 << 20

// apiKey keys a request by its API key (Authorization: Bearer ...),
// hashed: the store never holds a secret.
func apiKey(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:12])
}

// estimate reads r's body and returns the tokens to reserve for it: its
// max_tokens (defaultMaxTokens if absent) plus one token per 4 bytes of
// the body, which no tokenizer counts below the prompt's. It puts back the
// body, rewritten so that the upstream stops at what was reserved
// (max_tokens) and reports the usage of a stream (stream_options).
func estimate(r *http.Request) (int64, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return 0, fmt.Errorf("reading the body: %w", err)
	}
	var fields map[string]json.RawMessage
	var req chatRequest
	if err := json.Unmarshal(body, &fields); err != nil {
		return 0, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, fmt.Errorf("the body is not a chat completion request: %w", err)
	}
	if req.MaxTokens < 0 {
		return 0, errors.New("max_tokens is negative")
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = defaultMaxTokens
		fields["max_tokens"] = json.RawMessage(fmt.Sprint(defaultMaxTokens))
	}
	if req.Stream {
		fields["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	body, err = json.Marshal(fields)
	if err != nil {
		return 0, err
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	r.Header.Del("Content-Length")
	n := req.MaxTokens + (int64(len(body))+3)/4
	r.Header.Set(estimateHeader, strconv.FormatInt(n, 10)) // for the report of an aborted stream
	return n, nil
}

// estimateHeader carries a request's estimate from estimate to the
// report; the proxy sets it on every request and never forwards it.
const estimateHeader = "X-Llmproxy-Estimate"

// forward is what the report of an outgoing request needs from the
// incoming one, carried in its context (forwardKey): the key, hashed,
// and the estimate.
type forward struct {
	key      string
	estimate int64
}

type forwardKey struct{}

// estimateOf is the estimate of r (see estimate).
func estimateOf(r *http.Request) int64 {
	n, _ := strconv.ParseInt(r.Header.Get(estimateHeader), 10, 64)
	return n
}

// proxy forwards to the upstream at target, streaming each chunk to the
// client as it comes (FlushInterval -1). When a response is over, report
// gets its cost: the usage's total, the estimate when the usage never came
// (an aborted stream), 0 for an upstream error without usage.
func proxy(target *url.URL, report func(ctx context.Context, key string, tokens int64)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization") // the upstream's key is the proxy's own
			pr.Out.Header.Del(estimateHeader)
			pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), forwardKey{}, forward{key: apiKey(pr.In), estimate: estimateOf(pr.In)}))
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			r := resp.Request // the outgoing request, in the incoming one's context
			f, _ := r.Context().Value(forwardKey{}).(forward)
			ok := resp.StatusCode < 300
			resp.Body = newUsageReader(resp.Body, resp.Header.Get("Content-Type"), func(u *Usage) {
				switch {
				case u != nil:
					report(r.Context(), f.key, u.Total())
				case ok:
					report(r.Context(), f.key, f.estimate)
				default:
					report(r.Context(), f.key, 0)
				}
			})
			return nil
		},
	}
}

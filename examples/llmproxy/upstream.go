package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// chatRequest is the part of an OpenAI-compatible chat completion request
// the proxy and the fake upstream read.
type chatRequest struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens int64 `json:"max_tokens"`
	Stream    bool  `json:"stream"`
}

// Usage is a response's token count, as OpenAI-compatible APIs report it:
// in a non-streamed response's body, or a stream's last chunk before
// "data: [DONE]".
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// promptTokens is the fake upstream's count of a prompt's tokens: one per
// 4 bytes of each message, rounded up, as a rough tokenizer would.
func promptTokens(req *chatRequest) int64 {
	var n int64
	for _, m := range req.Messages {
		n += (int64(len(m.Content)) + 3) / 4
	}
	return n
}

// tokensPerChunk is how many completion tokens each streamed chunk holds.
const tokensPerChunk = 8

// upstream is a fake OpenAI-compatible API: POST /v1/chat/completions
// answers with a completion of half max_tokens (16 if absent) to all of it, chosen by the prompt, streamed
// as server-sent events when "stream" is true, ending with the usage
// chunk and "data: [DONE]". A request whose last message is "stall" stops
// after its first chunk until the client goes away (or 5 s), to show an
// aborted stream.
func upstream() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
			return
		}
		completion := req.MaxTokens
		if completion <= 0 {
			completion = 16
		}
		// Most answers stop before max_tokens: between half of it and all.
		completion -= completion * (promptTokens(&req) * 37 % 50) / 100
		u := Usage{PromptTokens: promptTokens(&req), CompletionTokens: completion}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"object":  "chat.completion",
				"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": strings.Repeat("tok ", int(completion))}}},
				"usage":   u,
			})
			return
		}
		stall := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Content == "stall"
		stream(w, r, u, stall)
	})
	return mux
}

// stream writes u's completion as SSE chunks, flushing each, then the
// usage chunk and [DONE].
func stream(w http.ResponseWriter, r *http.Request, u Usage, stall bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	for sent := int64(0); sent < u.CompletionTokens; sent += tokensPerChunk {
		n := min(tokensPerChunk, u.CompletionTokens-sent)
		if _, err := fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}],\"usage\":null}\n\n",
			strings.Repeat("tok ", int(n))); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if stall {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}
	usage, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{}, "usage": u})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", usage)
	if flusher != nil {
		flusher.Flush()
	}
}

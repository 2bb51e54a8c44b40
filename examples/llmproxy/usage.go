package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// maxLine bounds the bytes of one SSE line (or a JSON body) kept to find
// the usage: a longer one is passed through but not parsed (a usage chunk
// is some 200 bytes).
const maxLine = 1 << 20

// usageReader passes an upstream's response body through unchanged and
// finds the usage in it: the last SSE "data:" line that carries one, or a
// JSON body's. When the body is closed (the response is over, whether it
// ended or was aborted), done is called once with what it found.
type usageReader struct {
	body  io.ReadCloser
	sse   bool
	line  []byte // the current line, or the JSON body so far
	over  bool   // line passed maxLine: not parsed
	usage *Usage
	once  sync.Once
	done  func(u *Usage)
}

func newUsageReader(body io.ReadCloser, contentType string, done func(u *Usage)) *usageReader {
	return &usageReader{body: body, sse: strings.HasPrefix(contentType, "text/event-stream"), done: done}
}

func (u *usageReader) Read(p []byte) (int, error) {
	n, err := u.body.Read(p)
	u.scan(p[:n])
	if err == io.EOF && !u.sse {
		u.found(u.line)
	}
	return n, err
}

// Close closes the body and reports the usage.
func (u *usageReader) Close() error {
	err := u.body.Close()
	u.once.Do(func() { u.done(u.usage) })
	return err
}

// scan reads b: in a stream, line by line; a JSON body is kept whole.
func (u *usageReader) scan(b []byte) {
	for len(b) > 0 {
		i := len(b)
		if u.sse {
			if j := bytes.IndexByte(b, '\n'); j >= 0 {
				i = j
			}
		}
		if len(u.line)+i > maxLine {
			u.over, u.line = true, u.line[:0]
		} else if !u.over {
			u.line = append(u.line, b[:i]...)
		}
		if i == len(b) {
			return
		}
		if !u.over {
			u.sseLine(u.line)
		}
		u.line, u.over, b = u.line[:0], false, b[i+1:]
	}
}

// sseLine reads one SSE line: a "data:" line carrying a usage.
func (u *usageReader) sseLine(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if ok {
		u.found(data)
	}
}

// found keeps the usage in data (a chunk or a body), if it has one; the
// chunks before the last carry "usage":null.
func (u *usageReader) found(data []byte) {
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var v struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &v) == nil && v.Usage != nil {
		u.usage = v.Usage
	}
}

// Total is what u counts: its total_tokens, or the sum of its parts when
// the upstream leaves the total out.
func (u *Usage) Total() int64 {
	return max(u.TotalTokens, u.PromptTokens+u.CompletionTokens)
}

package modeltest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// TestSlidingCounterRetryAfterAfterWindowGrows (issue 43, item 7): after a
// spent sliding_counter's window grows from 60 s to 90 s, the window in
// progress keeps its 60 s-aligned start and the next one is 90 s-aligned,
// so it starts before the current one's end: a refusal's RetryAfter must
// say when that next window first admits (80 s here), not assume it starts
// where the current one ends (110 s, which a deny cache trusted: Peek
// admitted while Allow was refused from the cache). Checked on every
// stack (Go and Lua steps, the deny cache): at RetryAfter a Peek and a
// Take are admitted, and the control, a Peek 1 ms before, is refused (the
// RetryAfter is not merely early).
func TestSlidingCounterRetryAfterAfterWindowGrows(t *testing.T) {
	ctx := context.Background()
	old := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 3, Window: time.Minute}
	grown := old
	grown.Window = 90 * time.Second
	// b: 60 s-aligned, not 90 s-aligned, in the future of every store's
	// clock.
	const period = int64(180_000)
	b := (time.Now().UnixMilli()/period+1)*period + 60_000
	for si, st := range stacks(t) {
		t.Run(st.name, func(t *testing.T) {
			store := st.store
			if st.name == "memory" {
				store = newMemory(t)
			}
			key := backend.Key{Prefix: fmt.Sprintf("scgrow:%d:%d:", time.Now().UnixNano(), si), ID: "a"}
			at := func(ms int64, rule algorithms.Rule) backend.Request {
				return backend.Request{Key: key, Rule: rule, Now: time.UnixMilli(b + ms), Cost: 1}
			}
			for range 3 {
				if res, err := store.Take(ctx, at(1000, old)); err != nil || !res.Allowed {
					t.Fatalf("spending the 60 s window: %+v, %v", res, err)
				}
			}
			res, err := store.Take(ctx, at(10_000, grown))
			if err != nil || res.Allowed {
				t.Fatalf("a take after the window grew: %+v, %v; want refused", res, err)
			}
			retry := res.RetryAfter.Milliseconds()
			if retry != 80_000 {
				t.Errorf("RetryAfter %v after the window grew, want 1m20s (the 90 s-aligned next window)", res.RetryAfter)
			}
			if res, err := store.Peek(ctx, at(10_000+retry-1, grown)); err != nil || res.Allowed {
				t.Errorf("control: a Peek 1 ms before RetryAfter: %+v, %v; want refused", res, err)
			}
			if res, err := store.Peek(ctx, at(10_000+retry, grown)); err != nil || !res.Allowed {
				t.Errorf("a Peek at RetryAfter %v: %+v, %v; want admitted", res.RetryAfter, res, err)
			}
			if res, err := store.Take(ctx, at(10_000+retry, grown)); err != nil || !res.Allowed {
				t.Errorf("a Take at RetryAfter: %+v, %v; want admitted (cached=%v)", res, err, res.Cached)
			}
		})
	}
}

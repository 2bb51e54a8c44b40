package modeltest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// The Redis stores decide fixed windows with native commands (INCRBY, and
// a refund for a refused request): TestModel compares them exactly with
// the fixed window model. This is its control: the same runs on a store
// whose refused requests keep what they incremented (the client drops the
// refund's script) are caught, so the model sees a missing
// refund.
func TestModelCatchesMissingRefund(t *testing.T) {
	srv := redistest.Start(t)
	newStore := func(dropRefunds bool) *goredisstore.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		if dropRefunds {
			c.AddHook(refundDropper{})
		}
		store, err := goredisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	store := newStore(false)
	run := func(prefix string, seed uint64) error {
		return newRun(context.Background(), store, algorithms.FixedWindow, prefix, seed).Steps(600)
	}
	// The runs pass with the refunds, and are caught without them.
	const tries = 5
	for i := range tries {
		if err := run(fmt.Sprintf("refund:%d:", i), uint64(i)); err != nil {
			t.Fatalf("with refunds, seed %d: %v", i, err)
		}
	}
	store = newStore(true)
	caught := 0
	for i := range tries {
		if err := run(fmt.Sprintf("norefund:%d:", i), uint64(i)); err != nil {
			caught++
			if caught == 1 {
				t.Logf("caught (seed %d): %.300v", i, err)
			}
		}
	}
	if caught < tries {
		t.Fatalf("a store without refunds passed %d of %d runs: the model test cannot see a missing refund", tries-caught, tries)
	}
}

// refundDropper is a go-redis hook that never sends a refund: it drops
// every call of the native refund script (rediswire.RefundWindowScript).
type refundDropper struct{}

func (refundDropper) DialHook(next redis.DialHook) redis.DialHook { return next }

func (refundDropper) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	sum := sha1.Sum([]byte(rediswire.RefundWindowScript))
	sha := hex.EncodeToString(sum[:])
	return func(ctx context.Context, c redis.Cmder) error {
		if args := c.Args(); len(args) > 1 && (args[1] == sha || args[1] == rediswire.RefundWindowScript) {
			return nil
		}
		return next(ctx, c)
	}
}

func (refundDropper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

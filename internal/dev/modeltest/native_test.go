package modeltest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// The Redis stores decide fixed windows with native commands (INCRBY, and
// a refund for a refused request): TestModel compares them exactly with
// the fixed window model. This is its control: the same runs on a store
// whose refused requests keep what they incremented (the client drops the
// refund's SET NX and DECRBY) are caught, so the model sees a missing
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
// every pipeline holding a DECRBY (the refund's SET NX and DECRBY pairs).
type refundDropper struct{}

func (refundDropper) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (refundDropper) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (refundDropper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "decrby") {
				return nil
			}
		}
		return next(ctx, cmds)
	}
}

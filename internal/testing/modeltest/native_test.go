package modeltest

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/testing/redistest"
)

// The Redis stores decide fixed windows with native commands (INCRBY, and
// a refund for a refused request): TestModel compares them exactly with
// the fixed window model. This is its control: the same runs on a store
// whose refused requests keep what they incremented (the refund skipped)
// are caught, so the model sees a missing refund.
func TestModelCatchesMissingRefund(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	store, err := goredisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
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
	restore := redisscript.SetSkipNativeRefunds(true)
	defer restore()
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

package goredisstore

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/backend/internal/redisengine/conntest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestConnMalformedReplies: replies of the wrong shape through the adapter
// are errors, never panics.
func TestConnMalformedReplies(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	conntest.RejectsMalformedReplies(t, conn{client})
}

// TestConnBatchReplies: a failed request in a batch reply fails alone.
func TestConnBatchReplies(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	conntest.BatchReplies(t, conn{client}, srv)
}

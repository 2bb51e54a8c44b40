package goredisstore

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/internal/redisscript/scripttest"
)

// TestConnMalformedReplies: replies of the wrong shape through the adapter
// are errors, never panics.
func TestConnMalformedReplies(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	scripttest.ConnRejectsMalformedReplies(t, conn{client})
}

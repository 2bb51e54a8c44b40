package redisengine_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestKeyLivesAsKeyTTLSays checks the scripts' half of the key lifetime
// both engines share: after every admitted take (the write that sets the
// expiry), the Redis key's PTTL is Rule.KeyTTL(ResetAfter). miniredis keeps
// TTLs still unless told to move its clock, so the check is exact. The
// memory store's half is in backend/memorystore.
func TestKeyLivesAsKeyTTLSays(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	s, err := goredisstore.New(client)
	require.NoError(t, err)
	for _, name := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: name, Limit: 4, Window: 10 * time.Second}
		req := backend.Request{Key: backend.Key{Prefix: "ttl:", ID: "k"}, Rule: rule, Cost: 1}
		now := int64(1_767_225_600_000)
		admitted := 0
		for i := range 8 {
			now += int64(i) * 700
			req.Now = time.UnixMilli(now)
			res, err := s.Take(t.Context(), req)
			require.NoError(t, err)
			if !res.Allowed {
				continue
			}
			admitted++
			name := rediswire.Key(req.Key, rule)
			if rule.Algorithm == algorithms.FixedWindow {
				name, _, _ = rediswire.NativeKey(&req) // a key per window
			}
			ttl, err := client.PTTL(t.Context(), name).Result()
			require.NoError(t, err)
			require.Equal(t, rule.KeyTTL(res.ResetAfter.Milliseconds()), ttl.Milliseconds(), "%s take %d", name, i)
		}
		require.Greater(t, admitted, 2, name)
	}
}

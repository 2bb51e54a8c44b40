package memorystore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// TestKeyLivesAsKeyTTLSays checks the memory store's half of the key
// lifetime both engines share: after every take, a key expires at now +
// Rule.KeyTTL(ResetAfter). The scripts' half is in backend/internal/redisengine.
func TestKeyLivesAsKeyTTLSays(t *testing.T) {
	s, err := New()
	require.NoError(t, err)
	for _, name := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: name, Limit: 4, Window: 10 * time.Second}
		req := backend.Request{Key: backend.Key{Prefix: "ttl:", ID: "k"}, Rule: rule, Cost: 1}
		now := int64(1_767_225_600_000)
		for i := range 8 {
			now += int64(i) * 700
			req.Now = time.UnixMilli(now)
			res, err := s.Take(context.Background(), req)
			require.NoError(t, err)
			sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, algorithms.Lookup(name).Salt)
			e := sh.table.find(h1, h2)
			require.NotNil(t, e)
			require.Equal(t, now+rule.KeyTTL(res.ResetAfter.Milliseconds()), e.expires, "%s take %d", name, i)
		}
	}
}

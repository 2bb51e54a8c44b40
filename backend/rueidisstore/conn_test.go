package rueidisstore

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/internal/redisengine/conntest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestConnMalformedReplies: replies of the wrong shape through the adapter
// are errors, never panics.
func TestConnMalformedReplies(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	conntest.RejectsMalformedReplies(t, conn{c: client})
	conntest.BatchReplies(t, conn{c: client}, srv)
	_, err = conn{c: client}.Eval(t.Context(), redisengine.Command(9), "", []string{"k"}, nil)
	require.Error(t, err)
}

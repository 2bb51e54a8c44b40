package rueidisstore

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/redisscript"
	"github.com/limitkit/limitkit/internal/testing/redistest"
	"github.com/limitkit/limitkit/internal/testing/scripttest"
)

// TestConnMalformedReplies: replies of the wrong shape through the adapter
// are errors, never panics.
func TestConnMalformedReplies(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	scripttest.ConnRejectsMalformedReplies(t, conn{c: client})
	scripttest.ConnBatchReplies(t, conn{c: client}, srv)
	_, err = conn{c: client}.Eval(t.Context(), redisscript.Command(9), "", []string{"k"}, nil)
	require.Error(t, err)
}

package redistest

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port found taken when the server starts (here by another redis-server,
// which also answers PING) is replaced by a fresh one, and the other server
// is left alone.
func TestStartRetriesTakenPort(t *testing.T) {
	other := Start(t)
	otherPID := other.PID()

	picks := 0
	spec := dataSpec(redisServerBin, nil)
	spec.pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return other.Port(), nil
		}
		return freePort()
	}
	srv := startServer(t, spec)
	require.Equal(t, 2, picks)
	require.NotEqual(t, other.Port(), srv.Port())
	require.Contains(t, srv.LogTail(logTailLines), addrInUseText, "the first attempt failed to bind")

	info, err := srv.Do("INFO", "server")
	require.NoError(t, err)
	got, _ := infoField(info, "process_id")
	require.Equal(t, strconv.Itoa(srv.PID()), got)
	require.Equal(t, otherPID, other.PID())
	pong, err := other.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
}

func TestFreeClusterPort(t *testing.T) {
	for range 20 {
		p, err := freeClusterPort()
		require.NoError(t, err)
		require.Positive(t, p)
		require.LessOrEqual(t, p, maxClusterPort)
	}
}

func TestReadReplyFormats(t *testing.T) {
	require.Equal(t, "a\nb\n\n1\nc", formatReply([]any{"a", "b", nil, int64(1), []any{"c"}}))
	m, err := pairsToMap([]any{"k", "v", "n", int64(2)})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": "v", "n": "2"}, m)
	_, err = pairsToMap([]any{"odd"})
	require.Error(t, err)
}

package fallback_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/fallback"
)

// wrapped hides a store behind a wrapper, as the deny cache or an observer
// would: fallback must find the store's capabilities through Unwrap.
type wrapped struct{ backend.Store }

func (w wrapped) Unwrap() backend.Store { return w.Store }

// TestTimeoutHoldsTheReplicaAckWait (issue 22, defect 14): over a primary
// whose admissions wait for replicas (go-redis WithReplicaAck, 100 ms, as
// the README pairs it, behind a wrapper), New derives the deadline from the
// wait when WithTimeout is not given, accepts one that leaves AckHeadroom
// after the wait, and refuses a shorter one with an error naming both
// durations and what to change. Control: without the ack, the same
// WithTimeout is accepted as it is.
func TestTimeoutHoldsTheReplicaAckWait(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	const wait = 100 * time.Millisecond
	acked, err := goredisstore.New(c, goredisstore.WithReplicaAck(1, wait, backend.DenyUnconfirmed))
	require.NoError(t, err)
	plain, err := goredisstore.New(c)
	require.NoError(t, err)

	s := newStore(t, wrapped{acked})
	require.Equal(t, wait+fallback.DefaultTimeout, s.Stats().Timeout, "derived: the wait plus DefaultTimeout")

	s = newStore(t, wrapped{acked}, fallback.WithTimeout(wait+fallback.AckHeadroom))
	require.Equal(t, wait+fallback.AckHeadroom, s.Stats().Timeout)

	_, err = fallback.New(wrapped{acked}, fallback.WithTimeout(fallback.DefaultTimeout))
	require.Error(t, err)
	for _, want := range []string{"timeout 100ms", "wait of 100ms", "at least 150ms", "WithTimeout", "WithReplicaAck"} {
		require.ErrorContains(t, err, want)
	}

	s = newStore(t, wrapped{plain}, fallback.WithTimeout(fallback.DefaultTimeout))
	require.Equal(t, fallback.DefaultTimeout, s.Stats().Timeout, "control: no wait, nothing to fit")
}

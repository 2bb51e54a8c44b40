package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a replica of master (with --replicaof, so it is a
// replica again after Restart) and waits, at most 30 s, until it is in sync.
// opts apply to the replica.
func StartReplica(t testing.TB, master *Server, opts ...Option) *Server {
	t.Helper()
	o := applyOptions(opts)
	replica := startServer(t, o.tlsSpec(dataSpec("replica",
		append([]string{"--replicaof", loopback, strconv.Itoa(master.Port())}, o.args...))))
	WaitInSync(t, master, replica)
	return replica
}

// WaitInSync waits, at most 30 s, until replica's link to master is up,
// master sees it online and the replica has acknowledged an offset (until
// its first acknowledgement, about a second after the sync, WAIT counts it
// out), and fails the test otherwise.
func WaitInSync(t testing.TB, master, replica *Server) {
	t.Helper()
	acked := func() error {
		if err := replicaInSync(master, replica); err != nil {
			return err
		}
		info, err := master.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if s0, _ := infoField(info, "slave0"); strings.Contains(s0, ",offset=0,") {
			// A PUBLISH is replicated: it gives the replica an offset to
			// acknowledge without writing a key.
			_, _ = master.Do("PUBLISH", "redistest:sync", "1")
			return fmt.Errorf("replica has not acknowledged an offset yet: %s", s0)
		}
		return nil
	}
	if err := pollUntil(time.Now().Add(sentinelTimeout), acked); err != nil {
		t.Fatalf("redistest: replica %s not in sync with %s: %v\n%s", replica.Addr(), master.Addr(), err,
			logTails([]*Server{master, replica}))
	}
}

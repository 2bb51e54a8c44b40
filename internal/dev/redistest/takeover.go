package redistest

import (
	"errors"
	"fmt"
	"strings"
)

// Takeover promotes replica to master of its master's slots at once, with
// CLUSTER FAILOVER TAKEOVER (no agreement of the other masters, no wait for
// the master's failure to be detected), and waits as WaitOK does. Use it
// after killing a master: the cluster then fails over in a fraction of a
// second rather than after cluster-node-timeout and an election (three to
// five seconds), which is Redis's business, not the client's. A replica the
// cluster promoted on its own meanwhile is left as it is.
func (c *Cluster) Takeover(replica *Server) {
	c.t.Helper()
	if _, err := replica.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		if role, rerr := replica.Do("ROLE"); rerr != nil || !strings.HasPrefix(role, "master") {
			c.t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", replica.Addr(), err)
		}
	}
	c.WaitOK()
}

// Failover tells the first running sentinel to fail the master over at
// once (SENTINEL FAILOVER: no wait for down-after-milliseconds, no
// agreement of the others). Use it after killing the master, once the test
// has seen it dead; CurrentMaster tells when the replica is promoted. A
// failover already under way (INPROG) is left to finish.
func (s *Sentinel) Failover() {
	s.t.Helper()
	var errs []error
	for _, sn := range s.Sentinels {
		if !sn.running() {
			continue
		}
		_, err := sn.Do("SENTINEL", "FAILOVER", s.MasterName)
		if err == nil || strings.Contains(err.Error(), "INPROG") {
			return
		}
		errs = append(errs, fmt.Errorf("%s: %w", sn.Addr(), err))
	}
	s.t.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.MasterName, errors.Join(errs...))
}

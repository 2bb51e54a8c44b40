package redistest

import "strings"

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

package redistest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/rediswire"
)

const (
	// NumSlots is the number of hash slots of a Redis Cluster.
	NumSlots = rediswire.NumSlots

	// ClusterNodeTimeout is the cluster-node-timeout, in milliseconds, of
	// StartCluster's nodes: a master unreachable for that long is failed
	// over to its replica. Override it with WithArgs("--cluster-node-timeout", ...).
	ClusterNodeTimeout = 2000

	clusterTimeout      = 30 * time.Second // forming, then a healthy cluster
	clusterPoll         = 20 * time.Millisecond
	clusterQueryTimeout = time.Second // one node's answer while polling
	clusterNodeKind     = "cluster node"
	clusterConfigFile   = "nodes.conf"
)

// Cluster is a Redis Cluster of redis-server processes owned by a test.
//
// Masters and Replicas are the roles at creation: Masters ordered by the
// slots they serve (Masters[0] holds slot 0), Replicas in the order of their
// masters. They are not updated after a failover; ask MasterOf for the
// current owner of a slot.
type Cluster struct {
	Masters  []*Server
	Replicas []*Server

	t testing.TB
}

// StartCluster starts masters*(1+replicasPerMaster) redis-servers with
// cluster mode on (cluster-node-timeout ClusterNodeTimeout, announcing
// 127.0.0.1), joins them as `redis-cli --cluster create ...
// --cluster-replicas N` would (formCluster: its slot split, by CLUSTER
// ADDSLOTSRANGE, MEET and REPLICATE), and waits until every node reports
// cluster_state:ok, knows every other node and agrees on an assignment of
// all 16384 slots with replicasPerMaster replicas each, and every replica's
// link to its master is up. masters must be at least 3 (redis-cli's
// minimum). opts apply to every node. The nodes are killed in t.Cleanup.
//
// Each node's port p is chosen with its cluster bus port p+10000 free.
// With replicas, each master runs FLUSHALL once, on its still empty data
// set, so that Redis 7.0 lists the replicas in CLUSTER SLOTS at once rather
// than after its 10 s replication ping (it hides replicas whose replication
// offset is 0). A cluster of 3 masters is ready in a little over two
// seconds, Redis's own delay before a new master takes writes (redis-cli
// took two to four more, mostly its one-second polls).
func StartCluster(t testing.TB, masters, replicasPerMaster int, opts ...Option) *Cluster {
	t.Helper()
	Require(t, redisServerBin, redisCLIBin)
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: StartCluster(%d, %d): need at least 3 masters and no negative replica count", masters, replicasPerMaster)
	}
	o := applyOptions(opts)
	extra := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", clusterConfigFile,
		"--cluster-node-timeout", strconv.Itoa(ClusterNodeTimeout),
		"--cluster-announce-ip", loopback,
	}, o.args...)

	nodes := make([]*Server, masters*(1+replicasPerMaster))
	for i := range nodes {
		spec := o.tlsSpec(dataSpec(clusterNodeKind, extra))
		spec.pickPort = freeClusterPort
		// A failed attempt on another port may have left a nodes.conf.
		spec.prepare = func(s *Server, _ int) error {
			err := os.Remove(filepath.Join(s.dir, clusterConfigFile))
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		nodes[i] = startServer(t, spec)
	}
	c := &Cluster{t: t}

	if err := formCluster(nodes, masters); err != nil {
		t.Fatalf("redistest: forming the cluster: %v\n%s", err, logTails(nodes))
	}
	if replicasPerMaster > 0 {
		if err := primeReplicas(nodes, replicasPerMaster); err != nil {
			t.Fatalf("redistest: cluster replicas not in sync: %v\n%s", err, logTails(nodes))
		}
	}
	view, err := waitCluster(nodes, replicasPerMaster)
	if err != nil {
		t.Fatalf("redistest: cluster of %d nodes not ready: %v\n%s", len(nodes), err, logTails(nodes))
	}

	byPort := serversByPort(nodes)
	for _, r := range view {
		if m := byPort[r.master]; !slices.Contains(c.Masters, m) {
			c.Masters = append(c.Masters, m)
		}
	}
	for _, m := range c.Masters {
		for _, r := range view {
			if r.master != m.Port() {
				continue
			}
			for _, p := range r.replicas {
				if rep := byPort[p]; !slices.Contains(c.Replicas, rep) {
					c.Replicas = append(c.Replicas, rep)
				}
			}
		}
	}
	if len(c.Masters) != masters || len(c.Replicas) != masters*replicasPerMaster {
		t.Fatalf("redistest: cluster formed with %d masters and %d replicas, want %d and %d",
			len(c.Masters), len(c.Replicas), masters, masters*replicasPerMaster)
	}
	return c
}

// Nodes returns every node: Masters, then Replicas.
func (c *Cluster) Nodes() []*Server {
	return slices.Concat(c.Masters, c.Replicas)
}

// Addrs returns every node's address, masters first: the seed list for a
// cluster client.
func (c *Cluster) Addrs() []string {
	nodes := c.Nodes()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// MasterOf returns the node currently serving slot (0 to 16383), according
// to the CLUSTER SLOTS of the first running node that answers within a
// second. It fails the test when no node answers or the slot is unassigned.
// See KeySlot for a key's slot.
func (c *Cluster) MasterOf(slot int) *Server {
	c.t.Helper()
	if slot < 0 || slot >= NumSlots {
		c.t.Fatalf("redistest: MasterOf(%d): slot out of range [0, %d)", slot, NumSlots)
	}
	nodes := c.Nodes()
	byPort := serversByPort(nodes)
	var errs []error
	for _, n := range nodes {
		if !n.running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), clusterQueryTimeout)
		view, err := clusterSlots(ctx, n)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range view {
			if slot >= r.start && slot <= r.end {
				if m := byPort[r.master]; m != nil {
					return m
				}
				c.t.Fatalf("redistest: %s says slot %d is served by port %d, not a node of this cluster", n.Addr(), slot, r.master)
			}
		}
		errs = append(errs, fmt.Errorf("%s: slot %d is not assigned", n.Addr(), slot))
	}
	c.t.Fatalf("redistest: no node tells the master of slot %d: %v", slot, errors.Join(errs...))
	return nil
}

// WaitOK waits, at most 30 s, until every running node reports
// cluster_state:ok with all 16384 slots served, all agree on the master of
// every slot, and each such master is running; use it after a kill, a
// failover or a restart. It fails the test otherwise (for example when a
// killed master had no replica to take over).
func (c *Cluster) WaitOK() {
	c.t.Helper()
	nodes := c.Nodes()
	if _, err := waitCluster(nodes, -1); err != nil {
		c.t.Fatalf("redistest: cluster not ok: %v\n%s", err, logTails(nodes))
	}
}

// KeySlot returns the cluster hash slot of a key, as CLUSTER KEYSLOT does.
func KeySlot(key string) int { return rediswire.Slot(key) }

// formCluster joins the nodes into a cluster as redis-cli --cluster
// create does, without its one-second polls: distinct config epochs, the
// masters' even shares of the slots (redis-cli's split), a MEET of every
// node, then each replica (the nodes after the masters, in turn)
// REPLICATE its master once it knows it.
func formCluster(nodes []*Server, masters int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		id, err := n.DoContext(ctx, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", n.Addr(), err)
		}
		ids[i] = id
		if _, err := n.DoContext(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr(), err)
		}
	}
	share := float64(NumSlots) / float64(masters)
	first := 0
	for i := range masters {
		last := int(math.Round(float64(i+1)*share)) - 1
		if i == masters-1 {
			last = NumSlots - 1
		}
		if _, err := nodes[i].DoContext(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", nodes[i].Addr(), first, last, err)
		}
		first = last + 1
	}
	for _, n := range nodes[1:] {
		if _, err := nodes[0].DoContext(ctx, "CLUSTER", "MEET", loopback, strconv.Itoa(n.Port())); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", nodes[0].Addr(), n.Addr(), err)
		}
	}
	deadline, _ := ctx.Deadline()
	for k, n := range nodes[masters:] {
		master := ids[k%masters]
		// Unknown node until gossip brought the master to it.
		err := pollUntil(deadline, func() error {
			_, err := n.DoContext(ctx, "CLUSTER", "REPLICATE", master)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", n.Addr(), master, err)
		}
	}
	return nil
}

// primeReplicas waits until every replica's link to its master is up, then
// makes every master propagate a write (FLUSHALL, on a cluster still
// empty).
//
// Redis 7.0 leaves a replica out of CLUSTER SLOTS until its replication
// offset, as gossiped, is not 0, and a new master's offset only moves with
// writes or with its PING to replicas every repl-ping-replica-period (10 s).
// Without a write, the replicas would show up in CLUSTER SLOTS about 10 s
// late.
func primeReplicas(nodes []*Server, replicasPerMaster int) error {
	var masters []*Server
	err := pollUntil(time.Now().Add(clusterTimeout), func() error {
		masters = masters[:0]
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), clusterQueryTimeout)
			info, err := n.DoContext(ctx, "INFO", "replication")
			cancel()
			if err != nil {
				return err
			}
			switch role, _ := infoField(info, "role"); role {
			case "master":
				if got, _ := infoField(info, "connected_slaves"); got != strconv.Itoa(replicasPerMaster) {
					return fmt.Errorf("master %s: connected_slaves:%s, want %d", n.Addr(), got, replicasPerMaster)
				}
				masters = append(masters, n)
			case "slave":
				if st, _ := infoField(info, "master_link_status"); st != "up" {
					return fmt.Errorf("replica %s: master_link_status:%s", n.Addr(), st)
				}
			default:
				return fmt.Errorf("%s: role:%s", n.Addr(), role)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range masters {
		if _, err := m.Do("FLUSHALL"); err != nil {
			return err
		}
	}
	return nil
}

// slotRange is one entry of CLUSTER SLOTS, by port.
type slotRange struct {
	start, end int
	master     int
	replicas   []int // sorted
}

// clusterSlots returns a node's CLUSTER SLOTS, sorted by first slot.
func clusterSlots(ctx context.Context, n *Server) ([]slotRange, error) {
	v, err := n.DoValue(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: CLUSTER SLOTS replied %T", n.Addr(), v)
	}
	view := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		fields, ok := e.([]any)
		if !ok || len(fields) < 3 {
			return nil, fmt.Errorf("%s: malformed CLUSTER SLOTS entry %v", n.Addr(), e)
		}
		start, ok1 := fields[0].(int64)
		end, ok2 := fields[1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s: malformed CLUSTER SLOTS range %v", n.Addr(), e)
		}
		r := slotRange{start: int(start), end: int(end)}
		for i, f := range fields[2:] {
			port, err := slotNodePort(f)
			if err != nil {
				return nil, fmt.Errorf("%s: CLUSTER SLOTS %d-%d: %w", n.Addr(), start, end, err)
			}
			if i == 0 {
				r.master = port
			} else {
				r.replicas = append(r.replicas, port)
			}
		}
		slices.Sort(r.replicas)
		view = append(view, r)
	}
	slices.SortFunc(view, func(a, b slotRange) int { return a.start - b.start })
	return view, nil
}

// slotNodePort checks a CLUSTER SLOTS node entry ([ip, port, id, ...]) and
// returns its port.
func slotNodePort(f any) (int, error) {
	node, ok := f.([]any)
	if !ok || len(node) < 2 {
		return 0, fmt.Errorf("malformed node %v", f)
	}
	port, ok := node[1].(int64)
	if ip, _ := node[0].(string); !ok || ip != loopback {
		return 0, fmt.Errorf("node %v is not a loopback address", node[:2])
	}
	return int(port), nil
}

// checkCoverage checks that the ranges cover slots 0 to 16383 exactly once.
func checkCoverage(view []slotRange) error {
	next := 0
	for _, r := range view {
		if r.start != next || r.end < r.start {
			return fmt.Errorf("slots %d-%d follow slot %d", r.start, r.end, next-1)
		}
		next = r.end + 1
	}
	if next != NumSlots {
		return fmt.Errorf("slots %d-%d are not assigned", next, NumSlots-1)
	}
	return nil
}

// waitCluster polls until clusterProblem finds none, for at most
// clusterTimeout, and returns the agreed slot map.
func waitCluster(nodes []*Server, wantReplicas int) ([]slotRange, error) {
	deadline := time.Now().Add(clusterTimeout)
	for {
		view, err := clusterProblem(nodes, wantReplicas)
		if err == nil {
			return view, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after %v: %w", clusterTimeout, err)
		}
		time.Sleep(clusterPoll)
	}
}

// clusterProblem returns the slot map of a healthy cluster or what is wrong.
// With wantReplicas >= 0 every node must be running, know every node, and
// serve each slot range with that many replicas whose links are up; with
// wantReplicas < 0 only the running nodes are asked and replicas are not
// checked.
func clusterProblem(nodes []*Server, wantReplicas int) ([]slotRange, error) {
	byPort := serversByPort(nodes)
	var ref []slotRange
	var refAddr string
	for _, n := range nodes {
		if !n.running() {
			if wantReplicas >= 0 {
				return nil, fmt.Errorf("%s is not running", n.Addr())
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), clusterQueryTimeout)
		view, err := nodeProblem(ctx, n, len(nodes), wantReplicas)
		cancel()
		if err != nil {
			return nil, err
		}
		if ref == nil {
			ref, refAddr = view, n.Addr()
			continue
		}
		if !slices.EqualFunc(ref, view, func(a, b slotRange) bool {
			return a.start == b.start && a.end == b.end && a.master == b.master &&
				(wantReplicas < 0 || slices.Equal(a.replicas, b.replicas))
		}) {
			return nil, fmt.Errorf("%s and %s disagree on the slot map: %v vs %v", refAddr, n.Addr(), ref, view)
		}
	}
	if ref == nil {
		return nil, errors.New("no node is running")
	}
	for _, r := range ref {
		m := byPort[r.master]
		if m == nil {
			return nil, fmt.Errorf("slots %d-%d are served by port %d, not a node of this cluster", r.start, r.end, r.master)
		}
		if !m.running() {
			return nil, fmt.Errorf("slots %d-%d are served by %s, which is not running", r.start, r.end, m.Addr())
		}
		if wantReplicas < 0 {
			continue
		}
		for _, p := range r.replicas {
			rep := byPort[p]
			if rep == nil {
				return nil, fmt.Errorf("slots %d-%d are replicated on port %d, not a node of this cluster", r.start, r.end, p)
			}
			ctx, cancel := context.WithTimeout(context.Background(), clusterQueryTimeout)
			info, err := rep.DoContext(ctx, "INFO", "replication")
			cancel()
			if err != nil {
				return nil, err
			}
			if st, _ := infoField(info, "master_link_status"); st != "up" {
				return nil, fmt.Errorf("replica %s: master_link_status:%s", rep.Addr(), st)
			}
		}
	}
	return ref, nil
}

// nodeProblem checks one node's CLUSTER INFO and CLUSTER SLOTS.
func nodeProblem(ctx context.Context, n *Server, numNodes, wantReplicas int) ([]slotRange, error) {
	info, err := n.DoContext(ctx, "CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(NumSlots),
		"cluster_slots_ok":       strconv.Itoa(NumSlots),
	}
	if wantReplicas >= 0 {
		want["cluster_known_nodes"] = strconv.Itoa(numNodes)
	}
	for k, v := range want {
		if got, _ := infoField(info, k); got != v {
			return nil, fmt.Errorf("%s: %s:%s, want %s", n.Addr(), k, got, v)
		}
	}
	view, err := clusterSlots(ctx, n)
	if err != nil {
		return nil, err
	}
	if err := checkCoverage(view); err != nil {
		return nil, fmt.Errorf("%s: CLUSTER SLOTS: %w", n.Addr(), err)
	}
	if wantReplicas >= 0 {
		for _, r := range view {
			if len(r.replicas) != wantReplicas {
				return nil, fmt.Errorf("%s: slots %d-%d have %d replicas, want %d", n.Addr(), r.start, r.end, len(r.replicas), wantReplicas)
			}
		}
	}
	return view, nil
}

func serversByPort(nodes []*Server) map[int]*Server {
	m := make(map[int]*Server, len(nodes))
	for _, n := range nodes {
		m[n.Port()] = n
	}
	return m
}

// logTails returns the log tails of several servers, for failure messages.
func logTails(nodes []*Server) string {
	tails := make([]string, len(nodes))
	for i, n := range nodes {
		tails[i] = n.LogTail(10)
	}
	return strings.Join(tails, "\n")
}

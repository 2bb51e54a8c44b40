package redisengine

import (
	"strings"
	"sync"

	"github.com/limitkit/limitkit/internal/rediswire"
)

// Batching on a Redis Cluster: Takes, Peeks and TakeAlls, grouped by the
// node their first key's slot is on (a TakeAll only when all its keys are
// on that node).
//
// A script's declared keys must share one hash slot (CROSSSLOT otherwise,
// whatever the script's flags), but a script without a shebang line, as
// all of limitkit's are, may touch keys of any slot its node serves: Redis
// keeps that permissive default for scripts that declare no flags (the
// allow-cross-slot-keys behaviour; redis/redis#10615). So a batch for one
// node declares only its first key, which routes the call to that node in
// both clients, and passes every key in ARGV. A key whose slot the node no
// longer serves (a reshard, a failover) fails only its own request, with
// "Script attempted to access a non local key", before that request wrote
// anything (every key of one request shares its id's slot, and the first
// access is refused; a TakeAll reads every key before it writes one, and a
// Peek writes nothing); such a request is sent again alone, and the client
// follows MOVED/ASK for it.
//
// Redis discourages undeclared keys and may refuse them in a future major
// version (redis/redis#10958); the development line that brought a
// dictionary per slot (7.4) filed them under the declared key's slot until
// redis/redis#12906.
// TestClusterUndeclaredKeysLandInTheirSlot pins what the batches need.

// NodeLocator is implemented by Conns of cluster clients: NodeOf returns
// the address of the master that serves key's slot in the client's slot
// map, or "" when unknown. It must not wait on the network.
type NodeLocator interface {
	NodeOf(key string) string
}

// nonLocal reports whether a request of a cluster batch failed because its
// key's slot is not served by the node (it wrote nothing).
func nonLocal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "non local key")
}

// retryNonLocal sends a cluster batch's non-local requests again alone; a
// test turns it off as a control.
var retryNonLocal = true

// nodeBatchers holds the batchers of each cluster node.
type nodeBatchers struct {
	r   *Runner
	loc NodeLocator
	mu  sync.RWMutex
	by  map[string]*batchers
}

// maxNodeBatchers bounds the batchers kept: a cluster's masters, and the
// ones failovers and reshards add over time. Beyond it, the map starts
// again (idle batchers hold nothing).
const maxNodeBatchers = 1024

// nodeBatchesInFlight is how many batches of one kind a runner keeps in
// flight to one cluster node: one being decided while the next is written.
// Fewer than on one server (batchesInFlight), since the callers are split
// over the masters: with 4 per node, batches on a 3-master cluster held
// about 3 Takes against 10 on one server, and each batch costs the node a
// wake-up, a read and a write (BenchmarkServerCPU). It is a variable for
// that benchmark.
var nodeBatchesInFlight = 2

// batchersFor returns the batchers of the node serving key, or nil when
// the node is unknown (the call is then sent alone).
func (n *nodeBatchers) batchersFor(key string) *batchers {
	node := n.loc.NodeOf(key)
	if node == "" {
		return nil
	}
	n.mu.RLock()
	bs := n.by[node]
	n.mu.RUnlock()
	if bs != nil {
		return bs
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if bs = n.by[node]; bs == nil {
		if n.by == nil || len(n.by) >= maxNodeBatchers {
			n.by = map[string]*batchers{}
		}
		bs = newBatchers(n.r, true, nodeBatchesInFlight)
		n.by[node] = bs
	}
	return bs
}

// sameNode reports whether the client's slot map puts every key on the
// node of the first (a TakeAll that one script on that node can decide).
func (n *nodeBatchers) sameNode(keys []string) bool {
	node := n.loc.NodeOf(keys[0])
	for _, k := range keys[1:] {
		if node == "" || (rediswire.Slot(k) != rediswire.Slot(keys[0]) && n.loc.NodeOf(k) != node) {
			return false
		}
	}
	return node != ""
}

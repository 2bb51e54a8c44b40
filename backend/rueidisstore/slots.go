package rueidisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/internal/rediswire"
)

// rueidis keeps its slot map to itself, so the store keeps its own copy,
// from CLUSTER SLOTS, for NodeOf (package fallback's breaker per node).
const (
	// slotsRefresh is how old the copy may get while the store is used.
	slotsRefresh = time.Second
	// slotsRefreshAfterError is how soon it is refreshed after an error.
	slotsRefreshAfterError = 100 * time.Millisecond
	// slotsQueryTimeout bounds one node's answer to CLUSTER SLOTS.
	slotsQueryTimeout = 300 * time.Millisecond
)

// slotMap maps each hash slot to its master's address.
type slotMap struct {
	client rueidis.Client
	// table is nil until the first refresh succeeds.
	table atomic.Pointer[[rediswire.NumSlots]string]
	// due is when the next refresh may start (Unix ns).
	due        atomic.Int64
	refreshing atomic.Bool
}

// nodeOf returns the master of the slot of key (a Redis key, or just its
// hash tag in braces), or "" before the first refresh (or when the slot is
// not served). It starts a refresh in the background when one is due, and
// never waits for it.
func (m *slotMap) nodeOf(key string) string {
	if time.Now().UnixNano() >= m.due.Load() && m.refreshing.CompareAndSwap(false, true) {
		go m.refresh()
	}
	t := m.table.Load()
	if t == nil {
		return ""
	}
	return t[rediswire.Slot(key)]
}

// failed brings the next refresh closer after an error.
func (m *slotMap) failed() {
	soon := time.Now().Add(slotsRefreshAfterError).UnixNano()
	for {
		due := m.due.Load()
		if due <= soon || m.due.CompareAndSwap(due, soon) {
			return
		}
	}
}

// refresh asks the nodes, one after the other, for CLUSTER SLOTS until one
// answers, and keeps the old copy when none does.
func (m *slotMap) refresh() {
	defer m.refreshing.Store(false)
	m.due.Store(time.Now().Add(slotsRefresh).UnixNano())
	for _, node := range m.client.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), slotsQueryTimeout)
		t, err := clusterSlots(ctx, node)
		cancel()
		if err == nil {
			m.table.Store(t)
			return
		}
	}
	m.failed()
}

// clusterSlots reads one node's CLUSTER SLOTS into a slot table.
func clusterSlots(ctx context.Context, c rueidis.Client) (*[rediswire.NumSlots]string, error) {
	ranges, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	t := new([rediswire.NumSlots]string)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("rueidisstore: CLUSTER SLOTS: malformed range: %v", err)
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || start < 0 || end < start || end >= rediswire.NumSlots {
			return nil, fmt.Errorf("rueidisstore: CLUSTER SLOTS: malformed range %d-%d", start, end)
		}
		host, err1 := master[0].ToString()
		port, err2 := master[1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("rueidisstore: CLUSTER SLOTS: malformed node of slots %d-%d", start, end)
		}
		addr := host + ":" + strconv.FormatInt(port, 10)
		for s := start; s <= end; s++ {
			t[s] = addr
		}
	}
	return t, nil
}

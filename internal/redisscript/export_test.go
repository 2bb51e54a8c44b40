package redisscript

import "sync"

// SendWithFirstTake makes batches go with the deadline of their first Take
// and no least wait, as they did before sender and batchMinWait, for a
// control; it returns the undo.
func SendWithFirstTake() (undo func()) {
	oldSender, oldWait := sender, batchMinWait
	sender = func(batch []*pendingTake) *pendingTake { return batch[0] }
	batchMinWait = 0
	return func() { sender, batchMinWait = oldSender, oldWait }
}

// SetNodeBatchesInFlight sets how many batches of one kind a runner made
// from now on keeps in flight per cluster node; it returns the undo.
func SetNodeBatchesInFlight(n int) (undo func()) {
	old := nodeBatchesInFlight
	nodeBatchesInFlight = n
	return func() { nodeBatchesInFlight = old }
}

// ClusterBatchScript and ClusterBatchCall give tests the cluster form of a
// batch call.
var (
	ClusterBatchScript = clusterBatchScript
	ClusterBatchCall   = clusterBatchCall
)

// WithoutMemo makes runners made from now on send the TakeAll scripts
// without memo.lua, for a control; it returns the undo.
func WithoutMemo() (undo func()) {
	memoReads = false
	scripts = sync.OnceValue(buildScripts)
	return func() {
		memoReads = true
		scripts = sync.OnceValue(buildScripts)
	}
}

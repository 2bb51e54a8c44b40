package redisengine

// SendWithFirstTake makes batches go with the deadline of their first Take
// and no least wait, as they did before sender and batchMinWait, for a
// control; it returns the undo.
func SendWithFirstTake() (undo func()) {
	old := sendWithFirstTake.Swap(true)
	return func() { sendWithFirstTake.Store(old) }
}

// SetNodeBatchesInFlight sets how many batches of one kind a runner made
// from now on keeps in flight per cluster node; it returns the undo.
func SetNodeBatchesInFlight(n int) (undo func()) {
	old := nodeBatchesInFlight
	nodeBatchesInFlight = n
	return func() { nodeBatchesInFlight = old }
}

// SetSkipNativeRefunds turns the native path's refunds off (skip) or back
// on, and returns a function that restores the previous setting.
func SetSkipNativeRefunds(skip bool) (restore func()) {
	old := skipNativeRefunds.Swap(skip)
	return func() { skipNativeRefunds.Store(old) }
}

// SetSkipPartialRefunds makes a native pipeline that failed on some keys
// keep the others' increments (skip), a control; it returns the undo.
func SetSkipPartialRefunds(skip bool) (restore func()) {
	old := skipPartialRefunds.Swap(skip)
	return func() { skipPartialRefunds.Store(old) }
}

// SetWaitRefunds makes a refused native call wait for its refund past its
// deadline (wait), a control; it returns the undo.
func SetWaitRefunds(wait bool) (restore func()) {
	old := waitRefunds.Swap(wait)
	return func() { waitRefunds.Store(old) }
}

// SetRefundGate holds every native refund from now on until release is
// closed (each sends a value per key on parked first, and as many once
// it landed); it returns the undo.
func SetRefundGate(parked, release chan struct{}) (restore func()) {
	oldParked, oldRelease := refundParked, refundRelease
	refundParked, refundRelease = parked, release
	return func() { refundParked, refundRelease = oldParked, oldRelease }
}

// SetResetByDelete makes Reset delete fixed window keys as before epochs
// (del), a control; it returns the undo.
func SetResetByDelete(del bool) (restore func()) {
	old := resetByDelete
	resetByDelete = del
	return func() { resetByDelete = old }
}

// SetSkipRefundPeek makes a refund of an earlier fixed window report what
// its script read, not the window of now (skip), a control; it returns
// the undo.
func SetSkipRefundPeek(skip bool) (restore func()) {
	old := skipRefundPeek.Swap(skip)
	return func() { skipRefundPeek.Store(old) }
}

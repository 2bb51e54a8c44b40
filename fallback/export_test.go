package fallback

// SetSkipRequestLocator routes exact keys by Key's node (skip), as before
// the breaker followed the key written, a control; it returns the undo.
func SetSkipRequestLocator(skip bool) (restore func()) {
	old := skipRequestLocator
	skipRequestLocator = skip
	return func() { skipRequestLocator = old }
}

// SetSkipAbandonProbe turns off the probes of calls their callers
// abandoned (skip), a control; it returns the undo.
func SetSkipAbandonProbe(skip bool) (restore func()) {
	old := skipAbandonProbe
	skipAbandonProbe = skip
	return func() { skipAbandonProbe = old }
}

// SetSkipHolds turns off the holds on keys answered before an outage
// (skip), a control; it returns the undo.
func SetSkipHolds(skip bool) (restore func()) {
	old := skipHolds.Swap(skip)
	return func() { skipHolds.Store(old) }
}

// SetSkipLower keeps a held answer as it was whatever the primary says
// since (skip), a control; it returns the undo.
func SetSkipLower(skip bool) (restore func()) {
	old := skipLower
	skipLower = skip
	return func() { skipLower = old }
}

// SetSkipNext keeps no newer answer of the primary during a hold (skip),
// a control; it returns the undo.
func SetSkipNext(skip bool) (restore func()) {
	old := skipNext
	skipNext = skip
	return func() { skipNext = old }
}

// SetSkipKeepVia lets a credit take off the units the primary admitted
// under a hold and those its answer told were gone (skip), a control; it
// returns the undo.
func SetSkipKeepVia(skip bool) (restore func()) {
	old := skipKeepVia
	skipKeepVia = skip
	return func() { skipKeepVia = old }
}

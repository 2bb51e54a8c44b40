package algorithms

// The sliding log records one timestamp per admitted unit of cost, oldest
// first, and admits a request when the units with a timestamp after
// now-window, plus its cost, fit within the limit. A timestamp t has slid out
// at now when t <= now-window. Timestamps later than now (the clock went back)
// keep counting until they slide out. Only the newest limit timestamps can
// ever matter, so the log never holds more than limit of them.

func slidingLogTake(s *State, now, w, limit, cost int64) Outcome {
	l := &s.log
	l.shrinkTo(limit)
	l.dropOldest(l.countUpTo(now - w))
	out := Outcome{Remaining: limit - l.size}
	if cost <= out.Remaining {
		l.insert(now, cost, limit)
		out.Allowed = true
		out.Remaining -= cost
	} else {
		out.RetryAfter = l.at(l.size+cost-limit-1) + w - now
	}
	out.ResetAfter = l.at(l.size-1) + w - now
	return out
}

func slidingLogPeek(s *State, now, w, limit, cost int64) Outcome {
	l := &s.log
	expired := l.countUpTo(now - w)
	live := l.size - expired
	out := Outcome{Allowed: live+cost <= limit, Remaining: max(limit-live, 0)}
	if !out.Allowed {
		out.RetryAfter = l.at(expired+live+cost-limit-1) + w - now
	}
	if live > 0 {
		out.ResetAfter = l.at(l.size-1) + w - now
	}
	return out
}

// ring is a circular buffer of timestamps in ascending order. Its capacity
// grows with use, never beyond the limit.
type ring struct {
	buf  []int64
	head int
	size int64
}

func (r *ring) index(i int64) int {
	j := r.head + int(i)
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return j
}

func (r *ring) at(i int64) int64 { return r.buf[r.index(i)] }

// countUpTo returns how many timestamps are <= t.
func (r *ring) countUpTo(t int64) int64 {
	lo, hi := int64(0), r.size
	for lo < hi {
		mid := int64(uint64(lo+hi) >> 1)
		if r.at(mid) > t {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (r *ring) dropOldest(n int64) {
	if n == 0 {
		return
	}
	r.head = r.index(n)
	r.size -= n
	if r.size == 0 {
		r.head = 0
	}
}

// shrinkTo keeps only the newest limit timestamps and a buffer no larger than
// limit; it matters only when a key's limit was lowered.
func (r *ring) shrinkTo(limit int64) {
	if r.size > limit {
		r.dropOldest(r.size - limit)
	}
	if int64(len(r.buf)) > limit {
		r.resize(int(limit))
	}
}

// resize moves the timestamps into a new buffer of capacity c >= size.
func (r *ring) resize(c int) {
	buf := make([]int64, c)
	n := copy(buf, r.buf[r.head:min(len(r.buf), r.head+int(r.size))])
	copy(buf[n:], r.buf[:int(r.size)-n])
	r.buf, r.head = buf, 0
}

// insert records cost copies of t, keeping the order. Entries later than t
// (recorded before the clock went back) stay after it.
func (r *ring) insert(t, cost, limit int64) {
	need := r.size + cost
	if need > int64(len(r.buf)) {
		r.resize(int(min(max(2*int64(len(r.buf)), need, 4), limit)))
	}
	later := int64(0)
	for later < r.size && r.at(r.size-1-later) > t {
		later++
	}
	for i := r.size - 1; i >= r.size-later; i-- {
		r.buf[r.index(i+cost)] = r.buf[r.index(i)]
	}
	for i := r.size - later; i < r.size-later+cost; i++ {
		r.buf[r.index(i)] = t
	}
	r.size = need
}

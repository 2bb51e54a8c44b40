package algorithms

// The sliding log records one timestamp per admitted unit of cost, oldest
// first, and admits a request when the units with a timestamp after
// now-window, plus its cost, fit within the limit. A timestamp t has slid out
// at now when t <= now-window. Timestamps later than now (the clock went
// back) keep counting until they slide out.
//
// Requests can arrive out of timestamp order (callers read their clocks
// before their requests reach the store). So that every window of
// timestamps holds at most the limit whatever the arrival order, a timestamp
// that slid out is kept for one more window, where a late request's window
// can still see it; only older ones are forgotten, and those beyond the
// newest limit, which can never decide anything: a window that holds one of
// them holds the newest limit too. The log never holds more than limit.

func slidingLogTake(s *State, now, w, limit, cost int64) Outcome {
	l := &s.log
	l.shrinkTo(limit)
	// Forget what slid out a window ago, count what slid out since: by
	// binary search, since a busy key keeps up to a window of slid-out
	// entries; the oldest alone answers when nothing slid out.
	size := l.size()
	forgotten, expired := int64(0), int64(0)
	if size > 0 && l.at(0) <= now-w {
		forgotten = l.countUpTo(now - 2*w)
		expired = l.countUpTo(now - w)
	}
	l.dropOldest(forgotten)
	size -= forgotten
	expired -= forgotten
	live := size - expired
	out := Outcome{Remaining: limit - live}
	if cost <= out.Remaining {
		// Room for cost, taken from slid-out timestamps only: live+cost <= limit.
		if drop := size + cost - limit; drop > 0 {
			l.dropOldest(drop)
			size -= drop
		}
		l.insert(now, cost, limit)
		size += cost
		out.Allowed = true
		out.Remaining -= cost
	} else {
		out.RetryAfter = l.at(size+cost-limit-1) + w - now
	}
	out.ResetAfter = l.at(size-1) + w - now
	return out
}

func slidingLogPeek(s *State, now, w, limit, cost int64) Outcome {
	l := s.log
	expired := l.countUpTo(now - w)
	live := l.size() - expired
	out := Outcome{Allowed: live+cost <= limit, Remaining: max(limit-live, 0)}
	if !out.Allowed {
		out.RetryAfter = l.at(expired+live+cost-limit-1) + w - now
	}
	if live > 0 {
		out.ResetAfter = l.at(l.size()-1) + w - now
	}
	return out
}

// ring is a circular buffer of timestamps in ascending order, kept in one
// allocation: ring[0] is the position of the oldest timestamp, ring[1] the
// number of timestamps, and the rest the slots. Its capacity grows with use,
// never beyond the limit. The nil ring is empty.
type ring []int64

const ringHeader = 2

func (r ring) size() int64 {
	if r == nil {
		return 0
	}
	return r[1]
}

func (r ring) capacity() int64 { return max(int64(len(r))-ringHeader, 0) }

// slot returns the position in r of the i-th oldest timestamp.
func (r ring) slot(i int64) int64 {
	j := r[0] + i
	if c := r.capacity(); j >= c {
		j -= c
	}
	return ringHeader + j
}

func (r ring) at(i int64) int64 { return r[r.slot(i)] }

// countUpTo returns how many timestamps are <= t.
func (r ring) countUpTo(t int64) int64 {
	lo, hi := int64(0), r.size()
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

func (r ring) dropOldest(n int64) {
	if n == 0 {
		return
	}
	r[0] = r.slot(n) - ringHeader
	r[1] -= n
	if r[1] == 0 {
		r[0] = 0
	}
}

// shrinkTo keeps only the newest limit timestamps and a buffer no larger than
// limit; it matters only when a key's limit was lowered.
func (r *ring) shrinkTo(limit int64) {
	if r.size() > limit {
		r.dropOldest(r.size() - limit)
	}
	if r.capacity() > limit {
		r.resize(limit)
	}
}

// resize moves the timestamps into a new buffer of capacity c >= size.
func (r *ring) resize(c int64) {
	old := *r
	n := old.size()
	buf := make(ring, ringHeader+c)
	for i := range n {
		buf[ringHeader+i] = old.at(i)
	}
	buf[1] = n
	*r = buf
}

// insert records cost copies of t, keeping the order. Entries later than t
// (recorded before the clock went back) stay after it.
func (r *ring) insert(t, cost, limit int64) {
	size := r.size()
	need := size + cost
	if need > r.capacity() {
		r.resize(min(max(2*r.capacity(), need, 4), limit))
	}
	l := *r
	later := int64(0)
	for later < size && l.at(size-1-later) > t {
		later++
	}
	for i := size - 1; i >= size-later; i-- {
		l[l.slot(i+cost)] = l[l.slot(i)]
	}
	for i := size - later; i < size-later+cost; i++ {
		l[l.slot(i)] = t
	}
	l[1] = need
}

// remove deletes up to n timestamps equal to t, keeping the order.
func (r ring) remove(t, n int64) {
	size := r.size()
	end := r.countUpTo(t)
	k := min(n, end-r.countUpTo(t-1))
	if k <= 0 {
		return
	}
	for i := end; i < size; i++ {
		r[r.slot(i-k)] = r[r.slot(i)]
	}
	r[1] -= k
	if r[1] == 0 {
		r[0] = 0
	}
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// The lease cases: the life of concurrency leases (acquire, deny, release,
// renew, expiry, reset) on every store, which must be a backend.LeaseStore.
func leaseCases() []testCase {
	return []testCase{
		{"lease/life", leaseLife},
		{"lease/expiry", leaseExpiry},
		{"lease/renew", leaseRenew},
		{"lease/reset", leaseReset},
		{"lease/unique_ids", leaseUniqueIDs},
		{"lease/many_per_ms", leaseManyPerMs},
		{"lease/take_all", leaseTakeAll},
		{"lease/invalid_input", leaseInvalid},
	}
}

// leaseRule holds 3 leases at once per key, each for 10 s.
var leaseRule = algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 3, Window: 10 * time.Second}

func (c *checker) leaseStore() (backend.LeaseStore, bool) {
	ls, ok := c.store.(backend.LeaseStore)
	if !ok {
		c.r.Errorf("store %T does not implement backend.LeaseStore (Release, Renew)", c.store)
	}
	return ls, ok
}

func (c *checker) release(id string, rule algorithms.Rule, at time.Duration, cost, lease int64) (bool, bool) {
	ls, ok := c.leaseStore()
	if !ok {
		return false, false
	}
	held, err := ls.Release(c.ctx, c.request(id, rule, at, cost), lease)
	if err != nil {
		c.r.Errorf("Release(%q, %v, at %v, lease %d): unexpected error: %v", short(id), rule, at, lease, err)
		return false, false
	}
	return held, true
}

func (c *checker) renew(id string, rule algorithms.Rule, at time.Duration, cost, lease int64) (backend.Result, bool) {
	ls, ok := c.leaseStore()
	if !ok {
		return backend.Result{}, false
	}
	res, err := ls.Renew(c.ctx, c.request(id, rule, at, cost), lease)
	if err != nil {
		c.r.Errorf("Renew(%q, %v, at %v, lease %d): unexpected error: %v", short(id), rule, at, lease, err)
		return res, false
	}
	return res, true
}

// acquireN takes n leases of cost 1 on id at one instant, each expected
// admitted, and returns their ids.
func (c *checker) acquireN(id string, at time.Duration, n int) ([]int64, bool) {
	var ids []int64
	for i := range n {
		res, ok := c.take(id, leaseRule, at, 1)
		if !ok {
			return nil, false
		}
		if !res.Allowed || res.Lease <= 0 {
			c.r.Errorf("acquire %d on %q at %v: got %+v, want admitted with a lease id", i+1, id, at, res)
			return nil, false
		}
		ids = append(ids, res.Lease)
	}
	return ids, true
}

// wantHeld checks a release's report.
func (c *checker) wantHeld(what string, id string, at time.Duration, lease int64, want bool) bool {
	held, ok := c.release(id, leaseRule, at, 1, lease)
	if ok && held != want {
		c.r.Errorf("%s: Release(%q, lease %d) at %v: held %v, want %v", what, id, lease, at, held, want)
		return false
	}
	return ok
}

// wantDenied checks that a Take on id is denied.
func (c *checker) wantDenied(what, id string, at time.Duration) bool {
	res, ok := c.take(id, leaseRule, at, 1)
	if ok && (res.Allowed || res.Lease != 0 || res.RetryAfter <= 0) {
		c.r.Errorf("%s: Take(%q) at %v: got %+v, want a denial with RetryAfter > 0 and no lease", what, id, at, res)
		return false
	}
	return ok
}

// leaseLife: acquire up to N, deny, release frees one slot, a double release
// and a never-granted id are not held and free nothing.
func leaseLife(c *checker) {
	ids, ok := c.acquireN("k", at, 3)
	if !ok || !c.wantDenied("at the limit", "k", at+time.Second) {
		return
	}
	if !c.wantHeld("release", "k", at+time.Second, ids[1], true) {
		return
	}
	res, ok := c.take("k", leaseRule, at+time.Second, 1)
	if !ok {
		return
	}
	if !res.Allowed || res.Remaining != 0 || res.Lease <= 0 {
		c.r.Errorf("acquire after a release: got %+v, want admitted, remaining 0, a lease", res)
		return
	}
	if !c.wantHeld("release twice", "k", at+time.Second, ids[1], false) ||
		!c.wantHeld("release of an id never granted", "k", at+time.Second, ids[2]+12345, false) ||
		!c.wantHeld("release of a lease on another key", "other", at+time.Second, ids[0], false) ||
		!c.wantDenied("after releases that held nothing", "k", at+time.Second) {
		return
	}
	p, ok := c.peek("k", leaseRule, at+time.Second, 1)
	if ok && (p.Allowed || p.Remaining != 0) {
		c.r.Errorf("peek with 3 held: got %+v, want denied, remaining 0", p)
	}
}

// leaseExpiry: a lease not released expires after the window (fake clock):
// its slot comes back, and releasing it after that reports not held.
func leaseExpiry(c *checker) {
	ids, ok := c.acquireN("k", at, 3)
	if !ok {
		return
	}
	// The last of three same-ms leases is stamped 2/1000 ms after at, and
	// expires 1 ms after the first.
	last := at + time.Millisecond
	if !c.wantDenied("just before the first lease expires", "k", at+leaseRule.Window-time.Millisecond) {
		return
	}
	// Expired at now-window exactly: not held, and releasing it frees nothing
	// more than its expiry did.
	if !c.wantHeld("release after expiry", "k", at+leaseRule.Window, ids[0], false) {
		return
	}
	res, ok := c.take("k", leaseRule, at+leaseRule.Window, 1)
	if !ok {
		return
	}
	if !res.Allowed || res.Remaining != 0 {
		c.r.Errorf("acquire when the first lease expired: got %+v, want admitted, remaining 0", res)
		return
	}
	if !c.wantDenied("after the expired lease's slot was taken", "k", at+leaseRule.Window) ||
		!c.wantHeld("release of a live lease", "k", at+leaseRule.Window, ids[2], true) {
		return
	}
	p, ok := c.peek("k", leaseRule, last+leaseRule.Window+time.Second, 1)
	if ok && (!p.Allowed || p.Remaining != 2) {
		c.r.Errorf("peek when all but the newest expired: got %+v, want admitted, remaining 2", p)
	}
}

// leaseRenew: a renewal extends a held lease by the window from now, under
// a new id; the old id is then not held; a renewal after expiry is refused
// and changes nothing.
func leaseRenew(c *checker) {
	ids, r, ok := leaseRenewHeld(c)
	if !ok {
		return
	}
	// At window+1 s the other two expired; the renewed one holds on.
	t := at + leaseRule.Window + time.Second
	if !leaseRenewExpired(c, ids, t) {
		return
	}
	// Renewed again and released: its slot comes back.
	r2, ok := c.renew("k", leaseRule, t, 1, r.Lease)
	if !ok {
		return
	}
	if !r2.Allowed || r2.Lease <= r.Lease {
		c.r.Errorf("second renewal: got %+v, want admitted with an id above %d", r2, r.Lease)
		return
	}
	if c.wantHeld("release of the renewed lease", "k", t, r2.Lease, true) {
		p3, ok := c.peek("k", leaseRule, t, 1)
		if ok && p3.Remaining != 3 {
			c.r.Errorf("after releasing every lease: got %+v, want remaining 3", p3)
		}
	}
}

// leaseRenewHeld acquires three leases and renews the first: it returns
// their ids, the renewal, and whether all went as it should.
func leaseRenewHeld(c *checker) ([]int64, backend.Result, bool) {
	ids, ok := c.acquireN("k", at, 3)
	if !ok {
		return nil, backend.Result{}, false
	}
	r, ok := c.renew("k", leaseRule, at+8*time.Second, 1, ids[0])
	if !ok {
		return nil, backend.Result{}, false
	}
	if !r.Allowed || r.Lease <= ids[2] || r.Remaining != 0 || r.ResetAfter != leaseRule.Window {
		c.r.Errorf("renew of a held lease: got %+v, want admitted, a new id above %d, remaining 0, reset %v", r, ids[2], leaseRule.Window)
		return nil, backend.Result{}, false
	}
	return ids, r, true
}

// leaseRenewExpired checks at t, when the leases ids[1:] expired and the
// renewal of ids[0] holds on, that the old id is no longer held and an
// expired lease is not renewed.
func leaseRenewExpired(c *checker, ids []int64, t time.Duration) bool {
	p, ok := c.peek("k", leaseRule, t, 1)
	if ok && p.Remaining != 2 {
		c.r.Errorf("peek when the renewed lease alone is held: got %+v, want remaining 2", p)
		return false
	}
	if !c.wantHeld("release of the id before the renewal", "k", t, ids[0], false) {
		return false
	}
	late, ok := c.renew("k", leaseRule, t, 1, ids[1])
	if !ok {
		return false
	}
	if late.Allowed || late.Lease != 0 || late.Remaining != 2 {
		c.r.Errorf("renew after expiry: got %+v, want refused (Allowed false), no lease, remaining 2", late)
		return false
	}
	p2, ok := c.peek("k", leaseRule, t, 1)
	if ok && p2.Remaining != 2 {
		c.r.Errorf("after a refused renewal: got %+v, want remaining 2 (nothing taken)", p2)
		return false
	}
	return true
}

// leaseReset: Reset frees every slot; the leases held before it are not
// held after it.
func leaseReset(c *checker) {
	ids, ok := c.acquireN("k", at, 3)
	if !ok || !c.reset("k", leaseRule, at) {
		return
	}
	if !c.wantHeld("release after a reset", "k", at+time.Second, ids[0], false) {
		return
	}
	if _, ok := c.acquireN("k", at+time.Second, 3); ok {
		c.wantDenied("after refilling a reset key", "k", at+time.Second)
	}
}

// leaseUniqueIDs: leases granted in one millisecond, by concurrent callers
// and across a release, all get distinct ids, and each release frees its
// own lease only.
func leaseUniqueIDs(c *checker) {
	rule := leaseRule
	rule.Limit = 50
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	var errs []error
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				res, err := c.store.Take(c.ctx, c.request("k", rule, at, 1))
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case !res.Allowed || res.Lease <= 0:
					errs = append(errs, fmt.Errorf("got %+v, want admitted with a lease", res))
				case seen[res.Lease]:
					errs = append(errs, fmt.Errorf("lease id %d granted twice", res.Lease))
				default:
					seen[res.Lease] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.r.Errorf("50 acquires in one ms: %v", err)
		return
	}
	// Release one, acquire again in the same ms: a new id.
	var any int64
	for id := range seen {
		any = id
		break
	}
	held, ok := c.release("k", rule, at, 1, any)
	if !ok {
		return
	}
	if !held {
		c.r.Errorf("release of lease %d: held %v, want true", any, held)
		return
	}
	res, ok := c.take("k", rule, at, 1)
	if !ok {
		return
	}
	if !res.Allowed || seen[res.Lease] {
		c.r.Errorf("acquire after a release in the same ms: got %+v, want admitted with an id never granted before", res)
		return
	}
	if c.wantHeldRule("release of the released id again", rule, any, false) {
		p, ok := c.peek("k", rule, at, 1)
		if ok && p.Remaining != 0 {
			c.r.Errorf("a second release of a released lease freed a slot: got %+v, want remaining 0", p)
		}
	}
}

// leaseManyPerMs: a key granting hundreds of leases per ms (300 acquire
// and release pairs in each of 2 ms) keeps its ids at the clock, so leases
// then abandoned are held for the window from their grant and come back
// then (those bumped within one ms 1 ms later), not when ids that ran ahead
// of the clock (ms ids: about 600 ms late) would expire.
func leaseManyPerMs(c *checker) {
	for ms := range 2 {
		t := at + time.Duration(ms)*time.Millisecond
		for i := range 300 {
			res, ok := c.take("k", leaseRule, t, 1)
			if !ok {
				return
			}
			if !res.Allowed || res.Lease <= 0 {
				c.r.Errorf("pair %d at %v: got %+v, want admitted with a lease", i, t, res)
				return
			}
			if !c.wantHeld(fmt.Sprintf("pair %d", i), "k", t, res.Lease, true) {
				return
			}
		}
	}
	grant := at + 2*time.Millisecond
	ids, ok := c.acquireN("k", grant, 3)
	if !ok {
		return
	}
	end := grant + leaseRule.Window
	res, ok := c.take("k", leaseRule, end-time.Millisecond, 1)
	if !ok {
		return
	}
	if res.Allowed || res.RetryAfter != time.Millisecond {
		c.r.Errorf("1 ms before the abandoned leases time out: got %+v, want denied, RetryAfter 1ms", res)
		return
	}
	if res, ok = c.take("k", leaseRule, end, 1); ok && !res.Allowed {
		c.r.Errorf("when the first abandoned lease times out: got %+v, want admitted", res)
		return
	}
	if !ok || !c.wantHeld("release of the first abandoned lease at its timeout", "k", end, ids[0], false) ||
		!c.wantHeld("release of the last abandoned lease 1 ms after its timeout", "k", end+time.Millisecond, ids[2], false) {
		return
	}
	if _, ok := c.acquireN("k", end+time.Millisecond, 2); !ok ||
		!c.wantDenied("with the timed-out slots taken again", "k", end+time.Millisecond) {
		return
	}
	if ids[0] != base.Add(grant).UnixMicro() {
		c.r.Errorf("first lease of a new ms after 300 per ms: id %d, want %d (the grant time in 1/1000 ms)", ids[0], base.Add(grant).UnixMicro())
	}
}

func (c *checker) wantHeldRule(what string, rule algorithms.Rule, lease int64, want bool) bool {
	held, ok := c.release("k", rule, at, 1, lease)
	if ok && held != want {
		c.r.Errorf("%s: lease %d: held %v, want %v", what, lease, held, want)
		return false
	}
	return ok
}

// leaseTakeAll: a rate limit and a lease together, all or nothing. The
// result carries the lease id; a denied lease consumes no rate unit, and a
// rate denial takes no lease.
func leaseTakeAll(c *checker) {
	rate := part{"rate:", "u", algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 4, Window: time.Hour}}
	lease := part{"lease:", "u", algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 2, Window: 10 * time.Second}}
	both := []part{rate, lease}
	ids, ok := leaseTakeAllFull(c, both)
	if !ok {
		return
	}
	sub := *c
	sub.prefix = c.prefix + lease.prefix
	if !sub.wantHeldRule2(lease, ids[0]) {
		return
	}
	// Two rate units left, one lease slot: admitted, then the rate limit
	// denies with a lease slot still free.
	if res, ok := c.takeAll(both, at, 1); !ok || !res.Allowed || res.Lease <= 0 {
		c.r.Errorf("TakeAll after a release: got %+v, want admitted with a lease", res)
		return
	}
	if !sub.wantHeldRule2(lease, ids[1]) {
		return
	}
	res, ok := c.takeAll(both, at, 2)
	if !ok {
		return
	}
	if res.Allowed || res.Lease != 0 || res.Rule != 0 {
		c.r.Errorf("TakeAll cost 2 with one rate unit left: got %+v, want denied by request 0 and no lease", res)
		return
	}
	if p, ok := c.peekPart(lease, at); ok && p.Remaining != 1 {
		c.r.Errorf("lease slots after a rate denial: remaining %d, want 1 (the denial took no lease)", p.Remaining)
	}
}

// leaseTakeAllFull takes both (a rate limit of 4 and 2 lease slots) until
// the leases are all held, then once more: refused by the leases, taking
// nothing. It returns the lease ids and whether all went as it should.
func leaseTakeAllFull(c *checker, both []part) ([]int64, bool) {
	var ids []int64
	for i := range 2 {
		res, ok := c.takeAll(both, at, 1)
		if !ok {
			return nil, false
		}
		if !res.Allowed || res.Lease <= 0 {
			c.r.Errorf("TakeAll %d with a lease free: got %+v, want admitted with a lease id", i+1, res)
			return nil, false
		}
		ids = append(ids, res.Lease)
	}
	res, ok := c.takeAll(both, at, 1)
	if !ok {
		return nil, false
	}
	if res.Allowed || res.Lease != 0 || res.Rule != 1 {
		c.r.Errorf("TakeAll with both leases held: got %+v, want denied by request 1 and no lease", res)
		return nil, false
	}
	if p, ok := c.peekPart(both[0], at); !ok || p.Remaining != 2 {
		c.r.Errorf("rate limit after a lease denial: remaining %d, want 2 (the denial took nothing)", p.Remaining)
		return nil, false
	}
	return ids, true
}

func (c *checker) wantHeldRule2(p part, lease int64) bool {
	held, ok := c.release(p.id, p.rule, at, 1, lease)
	if ok && !held {
		c.r.Errorf("release of lease %d: not held, want held", lease)
		return false
	}
	return ok
}

// leaseInvalid: two leases in one TakeAll, and Release or Renew of a rule
// that holds no leases, are errors wrapping ErrInvalidRequest.
func leaseInvalid(c *checker) {
	ls, ok := c.leaseStore()
	if !ok {
		return
	}
	two := []backend.Request{
		{Key: c.key("a"), Rule: leaseRule, Now: base.Add(at), Cost: 1},
		{Key: backend.Key{Prefix: c.prefix + "b:", ID: "a"}, Rule: leaseRule, Now: base.Add(at), Cost: 1},
	}
	if _, err := c.store.TakeAll(c.ctx, two); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("TakeAll of two leases: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
	rate := c.request("a", algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Second}, at, 1)
	if _, err := ls.Release(c.ctx, rate, 1); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("Release on a sliding_log rule: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
	if _, err := ls.Renew(c.ctx, rate, 1); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("Renew on a sliding_log rule: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
	// Lease ids count 1/1000 ms below 2^53: the last ms that fits is
	// decided, the next refused.
	last := backend.Request{Key: c.key("far"), Rule: leaseRule, Now: time.UnixMilli(algorithms.MaxLeaseMillis), Cost: 1}
	if res, err := c.store.Take(c.ctx, last); err != nil || !res.Allowed || res.Lease != algorithms.MaxLeaseMillis*1000 {
		c.r.Errorf("acquire at MaxLeaseMillis: got %+v, %v; want admitted with lease %d", res, err, algorithms.MaxLeaseMillis*1000)
	}
	last.Now = last.Now.Add(time.Millisecond)
	if _, err := c.store.Take(c.ctx, last); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("acquire after MaxLeaseMillis: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
	bad := c.request("", leaseRule, at, 1)
	if _, err := ls.Release(c.ctx, bad, 1); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("Release with an empty id: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
}

package denycache

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Besides resets and refunds, two kinds of write can turn a denial into an
// admission (issue 22, defect 10): a write under another rule on the same
// prefix and algorithm (another window rolls a shared fixed window early,
// a lower limit trims a log), and a write stamped later than the denial's
// retry time (a process whose clock runs ahead rolls the window or slides
// the log). Neither is visible in a Result, so every process says, before
// it writes under a rule and then every probe interval, which rule it
// writes under on which prefix and how late its requests are stamped (a
// sighting). A prefix's group collects them:
//
//   - a denial is remembered only while its rule is the only one seen on its
//     prefix in the last ruleTTL, and a rule (again) seen there bumps the
//     group's generation, which ends every entry of the group;
//   - an entry answers only while no other process's request clock, as last
//     announced and advanced by the time since, has reached its retry time.

const (
	// maxGroups bounds the prefixes (per algorithm) tracked. Beyond it
	// denials on new prefixes are not remembered.
	maxGroups = 4096
	// clockTolerance (ms) is how far past its requests' times a process
	// announces its clock, so that a millisecond of jitter does not make
	// it announce again.
	clockTolerance = 50
	// noHorizon is a group's horizon while no other process writes there.
	noHorizon = math.MinInt64 / 2
)

// ignoreSightings makes the caches ignore rules and clocks of other writes,
// as before defect 10 was fixed: the control of its tests. Always false
// outside tests.
var ignoreSightings = false

type ruleID struct {
	limit  int64
	window time.Duration
}

type groupID struct {
	prefix string
	alg    algorithms.Name
}

type ruleKey struct {
	groupID
	ruleID
}

// group is what the cache knows of the writes on one prefix and algorithm.
type group struct {
	// Guarded by Store.sightMu.
	rules map[ruleID]int64 // rule -> when last seen (mono ms)
	peers map[string]peerClock
	seen  int64
	// gen is bumped whenever the group's entries may have stopped being
	// the store's answer.
	gen atomic.Uint64
	// horizon is how far (ms) the most advanced other process's request
	// clock runs ahead of mono, or noHorizon.
	horizon atomic.Int64
}

// peerClock is another process's request clock: its latest announced
// time minus mono when it was heard.
type peerClock struct {
	lead int64
	seen int64
}

// ownUse is this process's writes under one rule on one prefix.
type ownUse struct {
	mu            sync.Mutex // one announcement at a time
	group         atomic.Pointer[group]
	lastUsed      atomic.Int64 // mono ms
	lastAnnounced atomic.Int64 // mono ms
	announcedOff  atomic.Int64 // request time minus mono announced
	recentOff     atomic.Int64 // the largest since the last renewal
	used          atomic.Bool  // since the last renewal
}

func newOwnUse() *ownUse {
	u := &ownUse{}
	u.announcedOff.Store(math.MinInt64)
	u.recentOff.Store(math.MinInt64)
	return u
}

// ruleTTL (ms) is how long a sighting counts: three probe intervals, while
// a process writing under a rule renews it at least every two.
func (s *Store) ruleTTL() int64 { return 3 * s.opts.probe.Milliseconds() }

// use records, before a write, that this process writes req's rule on its
// prefix, and announces it first when that is news: the first write, a
// request stamped later than announced, or the last announcement two probe
// intervals old. It returns the group and its generation, for remember.
func (s *Store) use(ctx context.Context, req *backend.Request) (*group, uint64) {
	k := ruleKey{groupID{req.Key.Prefix, req.Rule.Algorithm}, ruleID{req.Rule.Limit, req.Rule.Window}}
	now := s.mono()
	off := req.Millis() - now
	v, ok := s.mine.Load(k)
	if !ok {
		v, _ = s.mine.LoadOrStore(k, newOwnUse())
	}
	u := v.(*ownUse)
	u.lastUsed.Store(now)
	storeMax(&u.recentOff, off)
	u.used.Store(true)
	if s.stale(u, now, off) {
		u.mu.Lock()
		if s.stale(u, now, off) {
			s.announceRule(ctx, k, u, now, off)
		}
		u.mu.Unlock()
	}
	if last := s.renewed.Load(); s.bus == nil && now-last >= s.opts.probe.Milliseconds() && s.renewed.CompareAndSwap(last, now) {
		s.renew(ctx) // no probe loop does it
	}
	g := u.group.Load()
	if g == nil {
		return nil, 0
	}
	return g, g.gen.Load()
}

func (s *Store) stale(u *ownUse, now, off int64) bool {
	return off > u.announcedOff.Load() || now-u.lastAnnounced.Load() >= 2*s.opts.probe.Milliseconds()
}

// announceRule records this process's sighting of k and queues it for the
// bus (post): the write goes ahead without waiting.
func (s *Store) announceRule(ctx context.Context, k ruleKey, u *ownUse, now, off int64) {
	at := now + off + clockTolerance
	u.group.Store(s.sight(k, s.id, at, now))
	u.lastAnnounced.Store(now)
	u.announcedOff.Store(off + clockTolerance)
	if s.bus == nil {
		return
	}
	msg := "r\x00" + s.id + "\x00" + string(k.alg) + "\x00" + strconv.FormatInt(k.limit, 10) + "\x00" +
		strconv.FormatInt(k.window.Milliseconds(), 10) + "\x00" + strconv.FormatInt(at, 10) + "\x00" + k.prefix
	s.post(msg)
}

// renew re-announces the rules used since the last renewal, forgets the
// ones unused for a TTL, and drops expired sightings.
func (s *Store) renew(ctx context.Context) {
	now := s.mono()
	s.renewed.Store(now)
	s.mine.Range(func(k, v any) bool {
		u := v.(*ownUse)
		if !u.used.Swap(false) {
			if now-u.lastUsed.Load() >= s.ruleTTL() {
				s.mine.CompareAndDelete(k, v)
			}
			return true
		}
		off := u.recentOff.Swap(math.MinInt64)
		if off == math.MinInt64 { // swapped by the renewal before, with the use it recorded
			return true
		}
		u.mu.Lock()
		s.announceRule(ctx, k.(ruleKey), u, now, off)
		u.mu.Unlock()
		return true
	})
	s.sightMu.Lock()
	s.sweep(now)
	s.sightMu.Unlock()
}

// heard applies another process's (or this one's) sighting from the bus:
// the fields after "r".
func (s *Store) heard(msg string) {
	f := strings.SplitN(msg, "\x00", 6)
	if len(f) != 6 {
		return
	}
	limit, err1 := strconv.ParseInt(f[2], 10, 64)
	window, err2 := strconv.ParseInt(f[3], 10, 64)
	at, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || limit <= 0 || window <= 0 {
		return
	}
	k := ruleKey{groupID{f[5], algorithms.Name(f[1])}, ruleID{limit, time.Duration(window) * time.Millisecond}}
	s.sight(k, f[0], at, s.mono())
}

// sight records that proc writes under k with requests stamped up to at,
// heard at now (mono). It returns k's group, or nil when the table is full.
func (s *Store) sight(k ruleKey, proc string, at, now int64) *group {
	s.sightMu.Lock()
	defer s.sightMu.Unlock()
	g := s.groups[k.groupID]
	if g == nil {
		if len(s.groups) >= maxGroups {
			s.sweep(now)
		}
		if len(s.groups) >= maxGroups {
			return nil
		}
		g = &group{rules: make(map[ruleID]int64), peers: make(map[string]peerClock)}
		g.horizon.Store(noHorizon)
		s.groups[k.groupID] = g
	}
	if last, ok := g.rules[k.ruleID]; !ok || now-last >= s.ruleTTL() {
		g.gen.Add(1) // a rule (again) in force: denials cached under another may not hold
	}
	g.rules[k.ruleID] = now
	g.seen = now
	if proc != s.id {
		lead := at - now
		p, ok := g.peers[proc]
		// Keep the largest lead (the least delivery delay) unless the
		// clock clearly went back.
		if !ok || lead >= p.lead || lead < p.lead-s.opts.probe.Milliseconds() {
			p.lead = lead
		}
		p.seen = now
		g.peers[proc] = p
	}
	s.updateHorizon(g, now)
	return g
}

// updateHorizon recomputes g's horizon from its live peers. A lower horizon may
// let entries answer that a write already ended, so it ends them all.
func (s *Store) updateHorizon(g *group, now int64) {
	h := int64(noHorizon)
	for proc, p := range g.peers {
		if now-p.seen >= s.ruleTTL() {
			delete(g.peers, proc)
			continue
		}
		h = max(h, p.lead)
	}
	if h < g.horizon.Load() {
		g.gen.Add(1)
	}
	g.horizon.Store(h)
}

// sweep drops expired sightings and groups; sightMu is held.
func (s *Store) sweep(now int64) {
	ttl := s.ruleTTL()
	for id, g := range s.groups {
		if now-g.seen >= ttl {
			g.gen.Add(1)
			delete(s.groups, id)
			continue
		}
		for r, last := range g.rules {
			if now-last >= ttl {
				delete(g.rules, r)
			}
		}
		s.updateHorizon(g, now)
	}
}

// cacheable reports whether a denial under rule, read from the store after
// g's generation was ggen, may be remembered: nothing happened to the
// group since, and no other rule is in force on it.
func (s *Store) cacheable(g *group, ggen uint64, rule ruleID) bool {
	if ignoreSightings {
		return true
	}
	if g == nil || g.gen.Load() != ggen {
		return false
	}
	now := s.mono()
	s.sightMu.Lock()
	defer s.sightMu.Unlock()
	for r, last := range g.rules {
		if r != rule && now-last < s.ruleTTL() {
			return false
		}
	}
	return true
}

// holds reports whether e may still answer: its group saw nothing new, and
// no other process's request clock has reached its retry time.
func (s *Store) holds(e *entry) bool {
	if ignoreSightings {
		return true
	}
	g := e.group
	if g == nil || g.gen.Load() != e.ggen {
		return false
	}
	h := g.horizon.Load()
	return h == noHorizon || s.mono()+h < e.retryAt
}

// mono is this process's monotonic clock in ms since the Store was made:
// the times of sightings, and the clock other processes' request clocks
// are projected on (it only has to advance at the rate of real time, and
// it is cheaper to read than the wall clock).
func (s *Store) mono() int64 { return time.Since(s.born).Milliseconds() }

func storeMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// countingStore counts the calls that reach its store.
type countingStore struct {
	backend.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, r backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, r)
}

func (s *countingStore) Peek(ctx context.Context, r backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Peek(ctx, r)
}

func (s *countingStore) TakeAll(ctx context.Context, rs []backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.TakeAll(ctx, rs)
}

func (s *countingStore) Reset(ctx context.Context, k backend.Key, r algorithms.Rule, now time.Time) error {
	s.calls.Add(1)
	return s.Store.Reset(ctx, k, r, time.Now())
}

// listStores returns the stores the list tests run on: memory and a real
// redis-server.
func listStores(t *testing.T) map[string]backend.Store {
	mem, err := memorystore.New()
	require.NoError(t, err)
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	rs, err := goredisstore.New(c)
	require.NoError(t, err)
	return map[string]backend.Store{"memory": mem, "redis": rs}
}

// TestExemptAndDenyLists: exempt keys are admitted and deny-listed keys
// denied beyond the limit with no store call, through Allow, AllowN, Peek
// and Wait; a key on no list is limited as before. The control is the same
// traffic on a limiter without lists: the store sees every call and the
// keys are limited.
func TestExemptAndDenyLists(t *testing.T) {
	ctx := context.Background()
	for name, st := range listStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, withLists := range []bool{true, false} {
				cs := &countingStore{Store: st}
				cfg := limiter.Config{Limit: 2, Window: time.Hour, Prefix: "lists:" + name + ":"}
				if withLists {
					cfg.Exempt = []string{"svc-health", "10.0.0.0/8", "2001:db8::/32"}
					cfg.Deny = []string{"mallory", "192.0.2.7", "10.9.0.0/16"}
				} else {
					cfg.Prefix += "control:"
				}
				lim, err := limiter.New(cs, cfg)
				require.NoError(t, err)
				listed := []string{"svc-health", "10.1.2.3", "::ffff:10.1.2.3", "2001:db8::5", "2001:db8::5%eth0", "2001:db8:1:2::/64", "mallory", "192.0.2.7", "10.9.8.7"}
				denied := map[string]bool{"mallory": true, "192.0.2.7": true, "10.9.8.7": true} // 10.9/16 is denied inside the exempt 10/8
				for _, key := range listed {
					var admitted int
					for range 5 {
						d, err := lim.Allow(ctx, key)
						require.NoError(t, err)
						if d.Allowed {
							admitted++
						}
						if withLists {
							require.Equal(t, !denied[key], d.Exempt, key)
							require.Equal(t, denied[key], d.DenyListed, key)
							require.Zero(t, d.RetryAfter, key)
						}
					}
					d, err := lim.AllowN(ctx, key, 2)
					require.NoError(t, err)
					p, err := lim.Peek(ctx, key)
					require.NoError(t, err)
					if withLists {
						require.Equal(t, !denied[key], d.Allowed && p.Allowed, key)
						if denied[key] {
							require.Zero(t, admitted, key)
						} else {
							require.Equal(t, 5, admitted, key)
						}
					} else {
						require.Equal(t, 2, admitted, "control: %s is limited", key)
					}
				}
				if withLists {
					require.Zero(t, cs.calls.Load(), "listed keys cost no store call")
					wctx, cancel := context.WithTimeout(ctx, time.Minute)
					_, err := lim.Wait(wctx, "mallory")
					cancel()
					require.ErrorIs(t, err, limiter.ErrDenyListed, "Wait does not wait for a deny-listed key")
					d, err := lim.Wait(ctx, "svc-health")
					require.NoError(t, err)
					require.True(t, d.Exempt)
					require.Zero(t, cs.calls.Load())
					// A network wider than every entry is on no list.
					d, err = lim.Allow(ctx, "2001:db8::/31")
					require.NoError(t, err)
					require.False(t, d.Exempt || d.DenyListed)
					require.EqualValues(t, 1, cs.calls.Load())
					// A key on no list still reaches the store.
					d, err = lim.Allow(ctx, "alice")
					require.NoError(t, err)
					require.True(t, d.Allowed)
					require.False(t, d.Exempt || d.DenyListed)
					require.EqualValues(t, 2, cs.calls.Load())
				} else {
					require.EqualValues(t, len(listed)*7, cs.calls.Load(), "control: every call reaches the store")
				}
			}
		})
	}
}

// TestListsSwapWithSetConfig: SetConfig changes the lists with the rest of
// the configuration; an invalid entry changes nothing.
func TestListsSwapWithSetConfig(t *testing.T) {
	ctx := context.Background()
	for name, st := range listStores(t) {
		t.Run(name, func(t *testing.T) {
			cs := &countingStore{Store: st}
			lim, err := limiter.New(cs, limiter.Config{Limit: 1, Window: time.Hour, Prefix: "swap:" + name + ":", Exempt: []string{"bob"}})
			require.NoError(t, err)
			d, err := lim.Allow(ctx, "bob")
			require.NoError(t, err)
			require.True(t, d.Exempt)
			require.Zero(t, cs.calls.Load())

			require.NoError(t, lim.SetConfig(limiter.Config{Limit: 1, Window: time.Hour, Prefix: "swap:" + name + ":", Deny: []string{"bob"}}))
			require.Equal(t, []string{"bob"}, lim.Config().Deny)
			require.Empty(t, lim.Config().Exempt)
			d, err = lim.Allow(ctx, "bob")
			require.NoError(t, err)
			require.True(t, d.DenyListed)
			require.False(t, d.Allowed)
			require.Zero(t, cs.calls.Load())

			err = lim.SetConfig(limiter.Config{Limit: 1, Window: time.Hour, Prefix: "swap:" + name + ":", Exempt: []string{"10.0.0.1/8"}})
			require.ErrorIs(t, err, limiter.ErrInvalidConfig)
			d, err = lim.Allow(ctx, "bob")
			require.NoError(t, err)
			require.True(t, d.DenyListed, "a refused change keeps the old lists")

			require.NoError(t, lim.SetConfig(limiter.Config{Limit: 1, Window: time.Hour, Prefix: "swap:" + name + ":"}))
			for i, want := range []bool{true, false} {
				d, err = lim.Allow(ctx, "bob")
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed, "request %d without lists", i)
			}
			require.EqualValues(t, 2, cs.calls.Load())
		})
	}
}

// TestListsInShadowMode: a shadow limit admits a deny-listed key and says
// it would have denied it.
func TestListsInShadowMode(t *testing.T) {
	st, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(st, limiter.Config{Limit: 1, Window: time.Hour, Mode: limiter.Shadow, Deny: []string{"mallory"}})
	require.NoError(t, err)
	d, err := lim.Wait(context.Background(), "mallory")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.True(t, d.ShadowDenied)
	require.True(t, d.DenyListed)
}

// TestBadListEntries: each bad entry is an error naming it.
func TestBadListEntries(t *testing.T) {
	st, err := memorystore.New()
	require.NoError(t, err)
	for entry, want := range map[string]string{
		"":              `exempt entry "": empty`,
		"10.0.0.1/8":    `exempt entry "10.0.0.1/8": has host bits set; write 10.0.0.0/8`,
		"10.0.0.0/33":   `exempt entry "10.0.0.0/33": not a valid CIDR prefix`,
		"10.0.0/8":      `exempt entry "10.0.0/8": not a valid CIDR prefix`,
		"2001:db8::/0x": "", // a key: the suffix is not a number of bits
		"GET /items":    "",
	} {
		_, err := limiter.New(st, limiter.Config{Limit: 1, Window: time.Hour, Exempt: []string{entry}})
		if want == "" {
			require.NoError(t, err, entry)
			continue
		}
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, entry)
		require.ErrorContains(t, err, want)
		_, err = limiter.New(st, limiter.Config{Limit: 1, Window: time.Hour, Deny: []string{entry}})
		require.ErrorContains(t, err, "deny entry")
	}
	_, err = limiter.NewComposite(st, []limiter.Config{{Limit: 1, Window: time.Hour, Exempt: []string{"a"}}})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
}

// TestListsInJSON: exempt and deny read and write in JSON; a bad entry is
// an error.
func TestListsInJSON(t *testing.T) {
	var c limiter.Config
	require.NoError(t, json.Unmarshal([]byte(`{"limit": 5, "window": "1m", "exempt": ["10.0.0.0/8", "ops"], "deny": ["mallory"]}`), &c))
	require.Equal(t, []string{"10.0.0.0/8", "ops"}, c.Exempt)
	require.Equal(t, []string{"mallory"}, c.Deny)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	var back limiter.Config
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, c, back)
	err = json.Unmarshal([]byte(`{"limit": 5, "window": "1m", "exempt": "ops"}`), &c)
	require.ErrorContains(t, err, `exempt: "ops" is not a list`)
	err = json.Unmarshal([]byte(`{"limit": 5, "window": "1m", "deny": ["a", 7]}`), &c)
	require.ErrorContains(t, err, `deny.1: 7 is not a string`)
	require.True(t, errors.Is(err, limiter.ErrInvalidConfig))
}

// TestListsAllocateNothing: an exempt or deny-listed decision, by key or
// by address, allocates nothing. The control, a key on no list of a
// limiter on a store that allocates per call, shows the count can rise.
func TestListsAllocateNothing(t *testing.T) {
	st, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(st, limiter.Config{Limit: 1, Window: time.Hour,
		Exempt: []string{"ops", "10.0.0.0/8", "2001:db8::/32"}, Deny: []string{"mallory", "192.0.2.0/24"}})
	require.NoError(t, err)
	ctx := context.Background()
	for _, key := range []string{"ops", "10.1.2.3", "2001:db8::1", "2001:db8:1:2::/64", "mallory", "192.0.2.9"} {
		allocs := testing.AllocsPerRun(100, func() { _, _ = lim.Allow(ctx, key) })
		require.Zero(t, allocs, key)
	}
	grow := &allocStore{Store: st}
	ctl, err := limiter.New(grow, limiter.Config{Limit: 1, Window: time.Hour, Exempt: []string{"ops"}})
	require.NoError(t, err)
	require.NotZero(t, testing.AllocsPerRun(100, func() { _, _ = ctl.Allow(ctx, "alice") }), "control")
}

// allocStore allocates on each Take.
type allocStore struct {
	backend.Store
	sink []byte
}

func (s *allocStore) Take(ctx context.Context, r backend.Request) (backend.Result, error) {
	s.sink = make([]byte, 64+len(s.sink)%2)
	return s.Store.Take(ctx, r)
}

// TestListEntriesReadStrictly (issue 22, defect 8): white space around an
// entry and an IPv6 zone are refused with an error saying what to change,
// instead of becoming an exact key or an address with zone "eth0/64".
func TestListEntriesReadStrictly(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	for entry, want := range map[string]string{
		"203.0.113.0/24 ": "has white space around it; remove it",
		" monitor":        "has white space around it; remove it",
		"fe80::1%eth0/64": "has an IPv6 zone",
		"fe80::1%eth0":    "has an IPv6 zone",
	} {
		_, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Deny: []string{entry}})
		require.ErrorIs(t, err, limiter.ErrInvalidConfig, "%q", entry)
		require.ErrorContains(t, err, want, "%q", entry)
	}
}

// TestAdmitAppliesAddressEntriesToClientsOnly (issue 22, defect 8): Admit
// matches address entries against Request.Client, never against a key
// that only looks like an address (a header's value); exact key entries
// still match the key. Control: Allow, whose caller chose the key, matches
// the key itself.
func TestAdmitAppliesAddressEntriesToClientsOnly(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "adm:",
		Exempt: []string{"10.0.0.0/8", "monitor"}, Deny: []string{"198.51.100.0/24"}})
	require.NoError(t, err)
	ctx := t.Context()
	admit := func(key, client string) limiter.Decision {
		req := limiter.Request{Keys: []string{key}}
		if client != "" {
			req.Client = netip.MustParseAddr(client)
		}
		_, d, err := lim.Admit(ctx, req)
		require.NoError(t, err)
		return d
	}
	for range 2 {
		assert.True(t, admit("10.9.9.9", "10.9.9.9").Exempt, "the client address is exempt")
		assert.True(t, admit("1:10.9.9.9", "::ffff:10.9.9.9").Exempt, "a FirstOf key of an exempt client")
		assert.True(t, admit("monitor", "").Exempt, "an exact key entry")
		assert.True(t, admit("x", "198.51.100.7").DenyListed, "a denied client")
	}
	assert.False(t, admit("10.9.9.9", "").Exempt, "a key that looks like an exempt address")
	assert.False(t, admit("10.9.9.9", "").Allowed, "...is limited like any key")
	assert.False(t, admit("198.51.100.7", "").DenyListed, "a key that looks like a denied address")

	d, err := lim.Allow(ctx, "10.1.1.1")
	require.NoError(t, err)
	assert.True(t, d.Exempt, "control: Allow matches the key itself")
}

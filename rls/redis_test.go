package rls

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// redisClients are the two Redis stores, each over addrs (one server, or
// the nodes of a cluster).
var redisClients = []struct {
	name string
	make func(t *testing.T, addrs []string, cluster bool) backend.Store
}{
	{"goredis", func(t *testing.T, addrs []string, cluster bool) backend.Store {
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0]})
		}
		t.Cleanup(func() { c.Close() })
		s, err := goredisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"rueidis", func(t *testing.T, addrs []string, _ bool) backend.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := rueidisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// The service's decisions on real Redis, both clients, one server and a
// 3-master cluster. On the cluster a request's keys (one per descriptor
// and limit) sit in different slots, so the stores' TakeAll checks them
// all (read-only) and then takes them in order, refunding on a late
// denial: a refused request still consumes nothing.
func TestOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3, 0)
	flush := func(t *testing.T, nodes []*redistest.Server) {
		for _, n := range nodes {
			if _, err := n.Do("FLUSHALL"); err != nil {
				t.Fatalf("FLUSHALL: %v", err)
			}
		}
	}
	topologies := []struct {
		name    string
		addrs   []string
		nodes   []*redistest.Server
		cluster bool
	}{
		{"single", []string{srv.Addr()}, []*redistest.Server{srv}, false},
		{"cluster", cluster.Addrs(), cluster.Nodes(), true},
	}
	for _, top := range topologies {
		for _, client := range redisClients {
			t.Run(top.name+"/"+client.name, func(t *testing.T) {
				store := client.make(t, top.addrs, top.cluster)
				fresh := func() backend.Store { flush(t, top.nodes); return store }
				t.Run("all or nothing", func(t *testing.T) {
					if err := checkAllOrNothing(t, fresh()); err != nil {
						t.Fatal(err)
					}
				})
				t.Run("control", func(t *testing.T) {
					if checkAllOrNothing(t, consumeOthers{fresh()}) == nil {
						t.Fatal("the check passed on a store that consumes the others")
					}
				})
				t.Run("retry times", func(t *testing.T) { checkRetries(t, fresh) })
				t.Run("negative hits", func(t *testing.T) { checkNegativeHits(t, fresh()) })
				t.Run("minute and hour", func(t *testing.T) {
					h := newHarness(t, fresh(), basicYAML)
					for range 10 {
						h.call(request("basic", 0, desc("key2", "a"), desc("key3", "a")))
					}
					resp := h.call(request("basic", 0, desc("key2", "a"), desc("key3", "a")))
					if resp.GetOverallCode() != over {
						t.Fatalf("11th: %v", resp)
					}
					expect(t, "minute", resp.GetStatuses()[0], ok, 10, -1)
				})
			})
		}
	}
}

package rlsbench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
	"github.com/limitkit/limitkit/rls"
)

// Client names.
const (
	Memory  = "memory"
	Rueidis = "rueidis"
	GoRedis = "go-redis"
)

// Groups of contenders.
const (
	GroupLimitkit  = "limitkit"
	GroupReference = "reference"
	GroupFloor     = "floor"
)

// Domain is the domain of the benchmark's configuration; its descriptor
// keys are DescriptorKeys, one rule each.
const Domain = "bench"

// DescriptorKeys are the keys of a request's descriptors, in order: a
// request of n descriptors uses the first n.
var DescriptorKeys = []string{"a", "b", "c"}

// Spec is the limit every rule of a contender has: RequestsPerUnit per
// Unit ("second", "minute", ...). Charge, when above 0, makes every
// request a charge of that many hits (hits_addend) on a domain charged
// after the response (limitkit: rls.WithChargedDomains, the setting
// LIMITKIT_CHARGED_DOMAINS; the reference adds the hits as it adds any).
type Spec struct {
	Unit            string
	RequestsPerUnit uint32
	Charge          uint32
}

// YAML returns the reference server's configuration of spec for
// algorithm ("" writes no algorithm: the reference's fixed window).
func (s Spec) YAML(alg algorithms.Name) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", Domain)
	for _, k := range DescriptorKeys {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n", k, s.Unit, s.RequestsPerUnit)
		if alg != "" {
			fmt.Fprintf(&b, "      algorithm: %s\n", alg)
		}
	}
	return b.String()
}

// Caller makes one ShouldRateLimit decision and reports whether it was
// OVER_LIMIT overall. Callers are safe for concurrent use.
type Caller func(ctx context.Context, req *rlsv3.RateLimitRequest) (over bool, err error)

// Contender is one way of deciding requests, started afresh for each cell.
type Contender struct {
	// Name identifies the contender in tables and in -run.
	Name string
	// Group is GroupLimitkit, GroupReference or GroupFloor; Client is
	// Memory, Rueidis, GoRedis (or "" for the gRPC floor).
	Group, Client string
	// Algorithm is the limitkit algorithm ("" for the others).
	Algorithm algorithms.Name
	// Start opens the contender's clients (go-redis pools dialled in full)
	// and, for a service, serves it over loopback gRPC; close releases all.
	Start func(redisAddr string, spec Spec) (call Caller, close func(), err error)
}

// Redis reports whether the contender keeps its state in Redis.
func (c Contender) Redis() bool { return c.Client == Rueidis || c.Client == GoRedis }

// RateAlgorithms lists the algorithms the rls service accepts: those that
// hold no leases.
func RateAlgorithms() []algorithms.Name {
	var names []algorithms.Name
	for _, a := range algorithms.Algorithms() {
		if !a.HoldsLeases() {
			names = append(names, a.Name)
		}
	}
	return names
}

// Contenders lists, for each of algs: limitkit's service on the memory
// store and on both Redis stores; then the reference algorithm on both
// clients; then the floors: loopback gRPC answering OK with no store, and
// from a plain client without gRPC one EVALSHA of `return 1` per request
// and the reference's pipelined INCRBY+EXPIRE per descriptor.
func Contenders(algs []algorithms.Name) []Contender {
	var cs []Contender
	for _, client := range []string{Memory, Rueidis, GoRedis} {
		for _, alg := range algs {
			cs = append(cs, Contender{Name: "limitkit " + client + " " + string(alg), Group: GroupLimitkit, Client: client, Algorithm: alg,
				Start: func(addr string, spec Spec) (Caller, func(), error) { return startLimitkit(client, addr, spec, alg) }})
		}
	}
	for _, client := range []string{Rueidis, GoRedis} {
		cs = append(cs, Contender{Name: ReferenceName(client), Group: GroupReference, Client: client,
			Start: func(addr string, spec Spec) (Caller, func(), error) { return startReference(client, addr, spec) }})
	}
	cs = append(cs, Contender{Name: FloorGRPC, Group: GroupFloor,
		Start: func(string, Spec) (Caller, func(), error) { return serve(okServer{}, func() {}) }})
	for _, client := range []string{Rueidis, GoRedis} {
		cs = append(cs,
			Contender{Name: FloorEvalName(client), Group: GroupFloor, Client: client,
				Start: func(addr string, _ Spec) (Caller, func(), error) { return startEvalFloor(client, addr) }},
			Contender{Name: FloorIncrName(client), Group: GroupFloor, Client: client,
				Start: func(addr string, spec Spec) (Caller, func(), error) { return startIncrFloor(client, addr, spec) }})
	}
	return cs
}

// FloorGRPC is the name of the gRPC floor.
const FloorGRPC = "floor gRPC, no store"

// ReferenceName, FloorEvalName and FloorIncrName name the reference
// algorithm and the Redis floors on client.
func ReferenceName(client string) string { return "reference " + client + " INCRBY+EXPIRE" }

// FloorEvalName names the EVALSHA floor on client; see ReferenceName.
func FloorEvalName(client string) string { return "floor " + client + " EVALSHA return 1" }

// FloorIncrName names the plain pipelined INCRBY+EXPIRE floor on client;
// see ReferenceName.
func FloorIncrName(client string) string { return "floor " + client + " INCRBY+EXPIRE" }

// LimitkitName names limitkit's service on client with alg.
func LimitkitName(client string, alg algorithms.Name) string {
	return "limitkit " + client + " " + string(alg)
}

// openClient returns a client of the harness's settings (a go-redis pool
// dialled in full, rueidis with its defaults: auto-pipelining) and its
// close.
func openClient(client, addr string) (any, func(), error) {
	switch client {
	case Rueidis:
		c, err := rueidis.NewClient(harness.RueidisOptions(addr))
		if err != nil {
			return nil, nil, fmt.Errorf("rueidis client: %w", err)
		}
		return c, c.Close, nil
	case GoRedis:
		c, err := harness.NewGoRedis(harness.GoRedisOptions(addr))
		if err != nil {
			return nil, nil, err
		}
		return c, func() { _ = c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown client %q", client)
}

// startLimitkit serves rls.New on client's store, with opts after the
// harness's own.
func startLimitkit(client, addr string, spec Spec, alg algorithms.Name, opts ...rls.Option) (Caller, func(), error) {
	var store backend.Store
	closeClient := func() {}
	switch client {
	case Memory:
		s, err := memorystore.New()
		if err != nil {
			return nil, nil, err
		}
		store = s
	default:
		c, closeC, err := openClient(client, addr)
		if err != nil {
			return nil, nil, err
		}
		closeClient = closeC
		if client == Rueidis {
			store, err = rueidisstore.New(c.(rueidis.Client))
		} else {
			store, err = goredisstore.New(c.(*redis.Client))
		}
		if err != nil {
			closeC()
			return nil, nil, err
		}
	}
	rules, err := rls.NewRules(rls.File{Name: "bench.yaml", Data: []byte(spec.YAML(alg))})
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	// A store error is a gRPC error here, so the harness counts it.
	own := []rls.Option{rls.WithErrorOnFailure(true)}
	if spec.Charge > 0 {
		own = append(own, rls.WithChargedDomains(Domain))
	}
	svc, err := rls.New(store, rules, append(own, opts...)...)
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	return serve(svc, closeClient)
}

func startReference(client, addr string, spec Spec) (Caller, func(), error) {
	cfg, err := rls.ParseConfig("bench.yaml", []byte(spec.YAML("")))
	if err != nil {
		return nil, nil, err
	}
	c, closeC, err := openClient(client, addr)
	if err != nil {
		return nil, nil, err
	}
	ref, err := NewReference(c, cfg)
	if err != nil {
		closeC()
		return nil, nil, err
	}
	return serve(ref, closeC)
}

// serve serves svc on a loopback port and returns a caller over one
// client connection (as one Envoy worker holds one).
func serve(svc rlsv3.RateLimitServiceServer, closeStore func()) (Caller, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		closeStore()
		return nil, nil, err
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func(ctx context.Context, req *rlsv3.RateLimitRequest) (bool, error) {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			return false, err
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			return false, fmt.Errorf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, nil
	}
	return call, func() {
		_ = conn.Close()
		srv.Stop()
		closeStore()
	}, nil
}

// okServer answers OK to everything without a store: the gRPC floor.
type okServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return resp, nil
}

// floorKey is the reference's key of one descriptor for a window of
// divider seconds.
func floorKey(d *ratelimitv3.RateLimitDescriptor, now, divider int64) string {
	var b strings.Builder
	b.WriteString(Domain + "_")
	for _, e := range d.GetEntries() {
		b.WriteString(e.Key + "_" + e.Value + "_")
	}
	b.WriteString(strconv.FormatInt(now/divider*divider, 10))
	return b.String()
}

func startEvalFloor(client, addr string) (Caller, func(), error) {
	c, closeC, err := openClient(client, addr)
	if err != nil {
		return nil, nil, err
	}
	keysOf := func(req *rlsv3.RateLimitRequest) []string {
		keys := make([]string, len(req.GetDescriptors()))
		for i, d := range req.GetDescriptors() {
			keys[i] = floorKey(d, 0, 1)
		}
		return keys
	}
	switch c := c.(type) {
	case rueidis.Client:
		script := rueidis.NewLuaScript("return 1")
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) (bool, error) {
			return false, script.Exec(ctx, c, keysOf(req), nil).Error()
		}, closeC, nil
	case *redis.Client:
		script := redis.NewScript("return 1")
		return func(ctx context.Context, req *rlsv3.RateLimitRequest) (bool, error) {
			return false, script.Run(ctx, c, keysOf(req)).Err()
		}, closeC, nil
	}
	closeC()
	return nil, nil, fmt.Errorf("unknown client %q", client)
}

func startIncrFloor(client, addr string, spec Spec) (Caller, func(), error) {
	cfg, err := rls.ParseConfig("bench.yaml", []byte(spec.YAML("")))
	if err != nil {
		return nil, nil, err
	}
	divider := int64(cfg.Descriptors[0].Limits[0].Window() / time.Second)
	c, closeC, err := openClient(client, addr)
	if err != nil {
		return nil, nil, err
	}
	ctr, err := newCounter(c)
	if err != nil {
		closeC()
		return nil, nil, err
	}
	limit := uint64(cfg.Descriptors[0].Limits[0].RequestsPerUnit)
	return func(ctx context.Context, req *rlsv3.RateLimitRequest) (bool, error) {
		now := time.Now().Unix()
		n := len(req.GetDescriptors())
		keys, hits, expire := make([]string, n), make([]uint64, n), make([]int64, n)
		for i, d := range req.GetDescriptors() {
			keys[i], hits[i], expire[i] = floorKey(d, now, divider), 1, divider
		}
		counts, err := ctr.incrExpire(ctx, keys, hits, expire)
		if err != nil {
			return false, err
		}
		for _, n := range counts {
			if n > limit {
				return true, nil
			}
		}
		return false, nil
	}, closeC, nil
}

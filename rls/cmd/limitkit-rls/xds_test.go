package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/testpki"
)

// egNodeID is the node id Envoy Gateway's deployment sets and keys its
// snapshots by.
const egNodeID = "envoy-ratelimit"

// controlPlane is go-control-plane's xDS server as Envoy Gateway runs it
// (internal/globalratelimit/runner): a snapshot cache, not in ADS mode,
// behind mutual TLS; it records every request its clients send.
type controlPlane struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache
	gs    *grpc.Server

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
}

func startControlPlane(t *testing.T, addr string, pki *testpki.PKI) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ca, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	cp.gs = grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	callbacks := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		cp.mu.Lock()
		cp.requests = append(cp.requests, req)
		cp.mu.Unlock()
		return nil
	}}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.gs, serverv3.NewServer(context.Background(), cp.cache, callbacks))
	var l net.Listener
	// The port of a restarted control plane may be held a moment longer.
	eventually(t, "listening on "+addr, func() bool {
		l, err = net.Listen("tcp", addr)
		return err == nil
	})
	cp.addr = l.Addr().String()
	go func() { _ = cp.gs.Serve(l) }()
	t.Cleanup(cp.gs.Stop)
	return cp
}

// set serves configs as snapshot version for Envoy Gateway's node.
func (cp *controlPlane) set(version string, configs ...*rlsconfv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), egNodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// sawRequest reports whether a client sent a request matching ok.
func (cp *controlPlane) sawRequest(ok func(*discoveryv3.DiscoveryRequest) bool) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, r := range cp.requests {
		if ok(r) {
			return true
		}
	}
	return false
}

// acked reports whether version was acknowledged.
func (cp *controlPlane) acked(version string) bool {
	return cp.sawRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == version && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	})
}

// egEnv is Envoy Gateway's environment for the rate limit deployment
// (internal/infrastructure/kubernetes/ratelimit/resource.go), with
// Prometheus on, the files of pki and the control plane at xdsAddr; only
// the listeners are moved to free loopback ports.
func egEnv(pki *testpki.PKI, redisAddr, xdsAddr string) map[string]string {
	return map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr,
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xdsAddr, "CONFIG_GRPC_XDS_NODE_ID": egNodeID,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": pki.ServerCert, "GRPC_SERVER_TLS_KEY": pki.ServerKey, "GRPC_SERVER_TLS_CA_CERT": pki.CA,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": pki.ServerCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": pki.ServerKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  pki.CA,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"USE_PROMETHEUS":                     "true", "PROMETHEUS_ADDR": "127.0.0.1:0", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
		// Moved from 0.0.0.0 to free loopback ports for the test.
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
}

// startTLS runs the service with env and connects to it with client.
func startTLS(t *testing.T, env map[string]string, client *tls.Config) *instance {
	t.Helper()
	return startWith(t, env, credentials.NewTLS(client))
}

// The route and its descriptors as Envoy Gateway's translator
// (internal/xds/translator/ratelimit.go) writes them for one HTTPRoute
// with four rules: an exact header match, a distinct header, a distinct
// source IP within a CIDR, and a shadow rule on all traffic.
const (
	egDomain = "default/eg/http"
	egRoute  = "httproute/default/backend/rule/0/match/0/www_example_com"
)

func egConfig(rule0Limit uint32) *rlsconfv3.RateLimitConfig {
	hour := rlsconfv3.RateLimitUnit_HOUR
	return &rlsconfv3.RateLimitConfig{
		Name: egDomain, Domain: egDomain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: egRoute, Value: egRoute,
			Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: hour, RequestsPerUnit: rule0Limit}},
				{Key: "rule-1-match-0", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: hour, RequestsPerUnit: 2}},
				{Key: "masked_remote_address", Value: "192.168.0.0/16", Descriptors: []*rlsconfv3.RateLimitDescriptor{
					{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: hour, RequestsPerUnit: 2}},
				}},
				{Key: "rule-3-match--1", Value: "rule-3-match--1", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: hour, RequestsPerUnit: 1}},
			},
		}},
	}
}

// egAsk sends what Envoy sends for the route: one descriptor, the route's
// entry then the rule's, with hits (0: Envoy's default of 1).
func egAsk(t *testing.T, in *instance, hits uint64, kv ...string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	d := descriptor(append([]string{egRoute, egRoute}, kv...)...)
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := in.rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", kv, err)
	}
	return resp.GetOverallCode()
}

func expectCodes(t *testing.T, in *instance, hits uint64, kv []string, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	for i, w := range want {
		if got := egAsk(t, in, hits, kv...); got != w {
			t.Fatalf("%v call %d: %v, want %v", kv, i+1, got, w)
		}
	}
}

// TestEnvoyGatewayXDS runs the service as Envoy Gateway deploys it: its
// environment, its xDS server over mutual TLS, its shape of
// RateLimitConfig, and Redis.
func TestEnvoyGatewayXDS(t *testing.T) {
	pki := testpki.New(t)
	redis := redistest.Start(t)
	cp := startControlPlane(t, "127.0.0.1:0", pki)
	in := startTLS(t, egEnv(pki, redis.Addr(), cp.addr), pki.Client)
	const (
		ok   = rlsv3.RateLimitResponse_OK
		over = rlsv3.RateLimitResponse_OVER_LIMIT
	)

	// FORCE_START_WITHOUT_INITIAL_CONFIG: listening, NOT_SERVING until a config.
	if st := in.healthStatus(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before any snapshot: %v, want NOT_SERVING", st)
	}
	if code, _ := in.get(t, in.HTTP, "/healthcheck"); code == 200 {
		t.Fatal("/healthcheck 200 before any snapshot")
	}

	cp.set("1", egConfig(3))
	eventually(t, "SERVING after snapshot 1", func() bool { return in.healthStatus(t) == healthpb.HealthCheckResponse_SERVING })
	if code, _ := in.get(t, in.HTTP, "/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d after snapshot 1", code)
	}
	eventually(t, "version 1 acknowledged", func() bool { return cp.acked("1") })
	if !cp.sawRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetNode().GetId() == egNodeID && r.GetTypeUrl() == resource.RateLimitConfigType
	}) {
		t.Fatal("no request for RateLimitConfig from node envoy-ratelimit")
	}

	rule0 := []string{"rule-0-match-0", "rule-0-match-0"}
	expectCodes(t, in, 0, rule0, ok, ok, ok, over)
	// A distinct header: each value its own count; hits_addend 2 takes two.
	alice := []string{"rule-1-match-0", "alice"}
	expectCodes(t, in, 2, alice, ok)
	expectCodes(t, in, 1, alice, over)
	expectCodes(t, in, 0, []string{"rule-1-match-0", "bob"}, ok, ok, over)
	// Distinct source IPs inside the CIDR.
	ip1 := []string{"masked_remote_address", "192.168.0.0/16", "remote_address", "192.168.1.1"}
	expectCodes(t, in, 0, ip1, ok, ok, over)
	expectCodes(t, in, 0, []string{"masked_remote_address", "192.168.0.0/16", "remote_address", "192.168.1.2"}, ok)
	// The shadow rule counts and never refuses.
	expectCodes(t, in, 0, []string{"rule-3-match--1", "rule-3-match--1"}, ok, ok, ok)

	// Version 2 raises rule 0 to 5 an hour: the 3 taken stay taken.
	cp.set("2", egConfig(5))
	eventually(t, "version 2 acknowledged", func() bool { return cp.acked("2") })
	expectCodes(t, in, 0, rule0, ok, ok, over)

	// Version 3 does not compile: refused with the reason, version 2 stays.
	bad := egConfig(5)
	bad.Descriptors[0].Descriptors[1].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	cp.set("3", bad)
	eventually(t, "version 3 refused with a reason", func() bool {
		return cp.sawRequest(func(r *discoveryv3.DiscoveryRequest) bool {
			return r.GetErrorDetail() != nil && r.GetVersionInfo() == "2" && strings.Contains(r.GetErrorDetail().GetMessage(), "unit")
		})
	})
	if cp.acked("3") {
		t.Fatal("version 3 acknowledged")
	}
	if v := in.metric(t, "ratelimit_service_config_load_error"); v != "1" {
		t.Fatalf("config_load_error %q after one refused version", v)
	}
	expectCodes(t, in, 0, rule0, over)
	expectCodes(t, in, 0, []string{"rule-1-match-0", "carol"}, ok, ok, over)
	if st := in.healthStatus(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after a refused version: %v", st)
	}

	// The control plane restarts on the same port, its versions from "1"
	// again, with rule 0 at 7: resubscribed, applied, counts kept.
	cp.gs.Stop()
	cp2 := startControlPlane(t, cp.addr, pki)
	cp2.set("1", egConfig(7))
	// After a failed retry the client waits XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
	// (10s, randomized by half): a longer bound than eventually's.
	deadline := time.Now().Add(90 * time.Second)
	for !cp2.acked("1") {
		if time.Now().After(deadline) {
			t.Fatal("the restarted control plane's version 1 not acknowledged within 90s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectCodes(t, in, 0, rule0, ok, ok, over)

	// Restarted again, serving version "1" once more (the version last
	// acknowledged) with other content: a client that reopened its stream
	// with version "1" would be sent nothing; this one asks with none.
	cp2.gs.Stop()
	cp3 := startControlPlane(t, cp.addr, pki)
	cp3.set("1", egConfig(9))
	deadline = time.Now().Add(90 * time.Second)
	for !cp3.acked("1") {
		if time.Now().After(deadline) {
			t.Fatal("the second restart's version 1 not acknowledged within 90s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cp3.sawRequest(func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() == "" && r.GetVersionInfo() != ""
	}) {
		t.Fatal("a new stream's first request carried a version")
	}
	expectCodes(t, in, 0, rule0, ok, ok, over)

	// Each version was compiled once: the refused one is not compiled again
	// when the server sends it again.
	if v := in.metric(t, "ratelimit_service_config_load_error"); v != "1" {
		t.Fatalf("config_load_error %q, want 1", v)
	}
	if v := in.metric(t, "ratelimit_service_config_load_success"); v != "4" {
		t.Fatalf("config_load_success %q, want 4 (versions 1, 2 and two restarts)", v)
	}

	// A plain-text client is refused by the TLS listener.
	plain, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(plain).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(egRoute, egRoute)}}); err == nil {
		t.Fatal("a plain-text client was answered")
	}
	// And so is a client without a certificate of the CA (GRPC_SERVER_TLS_CA_CERT).
	noCert := pki.Client.Clone()
	noCert.Certificates = nil
	nc, err := grpc.NewClient(in.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := rlsv3.NewRateLimitServiceClient(nc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(egRoute, egRoute)}}); err == nil {
		t.Fatal("a client without a certificate was answered")
	}
}

// TestXDSWaitsForFirstConfig: without FORCE_START_WITHOUT_INITIAL_CONFIG the
// service listens only once the first configuration is in force, as the
// reference does, and is SERVING from its first answer.
func TestXDSWaitsForFirstConfig(t *testing.T) {
	pki := testpki.New(t)
	cp := startControlPlane(t, "127.0.0.1:0", pki)
	env := egEnv(pki, "", cp.addr)
	delete(env, "FORCE_START_WITHOUT_INITIAL_CONFIG")
	delete(env, "REDIS_URL")
	delete(env, "REDIS_SOCKET_TYPE") // the memory store: this test is about start-up

	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, lookupOf(env), logs, func(a addrs) { ready <- a }) }()
	eventually(t, "waiting for the first configuration", func() bool { return strings.Contains(logs.String(), "waiting for the first rate limit configuration") })
	select {
	case <-ready:
		t.Fatal("listening before any configuration")
	default:
	}
	cp.set("1", egConfig(3))
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("not listening within 30s of the first snapshot\n%s", logs)
	}
	in := &instance{t: t, addrs: a}
	conn, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(pki.Client)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in.rl, in.health = rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	if st := in.healthStatus(t); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health at the first answer: %v", st)
	}
	expectCodes(t, in, 0, []string{"rule-0-match-0", "rule-0-match-0"}, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK,
		rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after SIGTERM: %v", err)
	}
}

// TestXDSStopsWhileWaiting: a shutdown while waiting for the first
// configuration ends run with an error naming the server.
func TestXDSStopsWhileWaiting(t *testing.T) {
	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, lookupOf(env), logs, nil) }()
	eventually(t, "waiting for the first configuration", func() bool { return strings.Contains(logs.String(), "waiting for the first") })
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of shutdown")
	}
}

// TestXDSServerNameVerified: the xDS server's certificate must carry
// CONFIG_GRPC_XDS_SERVER_TLS_SAN; a wrong name is never subscribed to.
func TestXDSServerNameVerified(t *testing.T) {
	pki := testpki.New(t)
	for _, c := range []struct {
		san string
		ok  bool
	}{{testpki.ServerName, true}, {"other.example", false}} {
		t.Run(c.san, func(t *testing.T) {
			cp := startControlPlane(t, "127.0.0.1:0", pki)
			cp.set("1", egConfig(3))
			env := egEnv(pki, "", cp.addr)
			delete(env, "REDIS_URL")
			delete(env, "REDIS_SOCKET_TYPE")
			env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = c.san
			in := startTLS(t, env, pki.Client)
			if c.ok {
				eventually(t, "version 1 acknowledged", func() bool { return cp.acked("1") })
				return
			}
			eventually(t, "the server's certificate refused", func() bool {
				return strings.Contains(in.logs.String(), "xDS stream failed") && strings.Contains(in.logs.String(), "other.example")
			})
			if cp.sawRequest(func(*discoveryv3.DiscoveryRequest) bool { return true }) {
				t.Fatal("subscribed to a server of the wrong name")
			}
			if st := in.healthStatus(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("health: %v", st)
			}
		})
	}
}

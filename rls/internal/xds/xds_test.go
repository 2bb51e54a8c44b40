package xds

import (
	"context"
	"errors"
	"net"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/rls"
)

func policy(unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

// TestConvertMatchesYAML: a RateLimitConfig compiles to the rules its
// YAML twin compiles to, field by field of the reference's conversion.
func TestConvertMatchesYAML(t *testing.T) {
	meta, _ := structpb.NewStruct(map[string]any{"team": "payments"})
	pb := &rlsconfv3.RateLimitConfig{Name: "res", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "a", Value: "1", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 2, Name: "tight",
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "loose"}}}, Metadata: meta},
		{Key: "b", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "c", RateLimit: policy(rlsconfv3.RateLimitUnit_HOUR, 1), ShadowMode: true, DetailedMetric: true},
		}},
		{Key: "u", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "q", QuotaMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "loose"}},
	}}
	files, err := Files([]*rlsconfv3.RateLimitConfig{pb})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name != "xds res" {
		t.Fatalf("files %+v", files)
	}
	got, err := rls.ParseConfig(files[0].Name, files[0].Data)
	if err != nil {
		t.Fatalf("%v\n%s", err, files[0].Data)
	}
	want, err := rls.ParseConfig("y", []byte(`
domain: d
descriptors:
  - key: a
    value: "1"
    rate_limit: {unit: minute, requests_per_unit: 2, name: tight, replaces: [{name: loose}]}
    metadata: {team: payments}
  - key: b
    descriptors:
      - key: c
        rate_limit: {unit: hour, requests_per_unit: 1}
        shadow_mode: true
        detailed_metric: true
  - key: u
    rate_limit: {unlimited: true}
  - key: q
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 5, name: loose}
`))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := describe(got.Descriptors), describe(want.Descriptors); g != w || got.Domain != want.Domain {
		t.Fatalf("from xDS:\n%s\nfrom YAML:\n%s", g, w)
	}
	if _, err := Compile([]*rlsconfv3.RateLimitConfig{pb}, rls.NewRules); err != nil {
		t.Fatal(err)
	}
}

// describe prints a descriptor tree without lines.
func describe(ds []*rls.Descriptor) string {
	var b strings.Builder
	var walk func([]*rls.Descriptor, string)
	walk = func(ds []*rls.Descriptor, indent string) {
		for _, d := range ds {
			b.WriteString(indent + d.Key + "=" + d.Value)
			for _, l := range d.Limits {
				l.Line = 0
				b.WriteString(" " + l.Unit.String() + ":" + string(rune('0'+l.RequestsPerUnit)) + ":" + l.Name + ":" + strings.Join(l.Replaces, "|"))
			}
			if d.Unlimited {
				b.WriteString(" unlimited")
			}
			if d.ShadowMode {
				b.WriteString(" shadow")
			}
			if d.DetailedMetric {
				b.WriteString(" detailed")
			}
			b.WriteString("\n")
			walk(d.Descriptors, indent+"  ")
		}
	}
	walk(ds, "")
	return b.String()
}

// TestConvertErrors: what the reference refuses is refused, naming the
// resource and the place, without the line of the YAML in between.
func TestConvertErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  []*rlsconfv3.RateLimitConfig
		want string
	}{
		{"unknown unit", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1)}}}}, "xds r: descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'"},
		{"empty domain", []*rlsconfv3.RateLimitConfig{{Name: "r"}}, "xds r"},
		{"empty key", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Value: "v"}}}}, "empty key"},
		{"duplicate", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}}}, "duplicate"},
		{"two resources, one domain", []*rlsconfv3.RateLimitConfig{{Name: "r1", Domain: "d"}, {Name: "r2", Domain: "d"}}, "duplicate domain"},
		{"unlimited with a unit", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_HOUR}}}}}, "unlimited"},
		{"nil", []*rlsconfv3.RateLimitConfig{nil}, "empty"},
	} {
		_, err := Compile(c.cfg, rls.NewRules)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		var ce *rls.ConfigError
		if errors.As(err, &ce) && ce.Line != 0 {
			t.Errorf("%s: a line of the intermediate YAML: %v", c.name, err)
		}
	}
	// Nesting as deep as files accept converts whole (a cut tree would
	// lose its deepest limits); past the converter's bound it is refused.
	deep := func(levels int) []*rlsconfv3.RateLimitConfig {
		d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}
		for range levels - 1 {
			d = &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
		}
		return []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}}
	}
	rules, err := Compile(deep(500), rls.NewRules)
	if err != nil {
		t.Fatalf("500 levels: %v", err)
	}
	// The limit at the bottom applies: 1 per second, so the second of two
	// calls is over.
	store, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(store, rules)
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
	for range 500 {
		req.Descriptors[0].Entries = append(req.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k"})
	}
	var codes []rlsv3.RateLimitResponse_Code
	for range 2 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode)
	}
	if codes[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("500 levels: codes %v; the deepest limit was lost", codes)
	}
	if _, err := Compile(deep(maxDepth+1), rls.NewRules); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("%d levels: %v", maxDepth+1, err)
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for n := range 5 {
		got = append(got, b.next(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("without jitter %v, want %v", got, want)
		}
	}
	b.Jitter, b.RandomFactor = true, 0.5
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.next(1)
		if d < time.Second || d > 3*time.Second {
			t.Fatalf("2s ± 50%%: %v", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter gave %d distinct waits of 200", len(seen))
	}
}

// server is a go-control-plane xDS server in plain text for the client's
// own tests.
type server struct {
	cache cachev3.SnapshotCache
	addr  string
	gs    *grpc.Server

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
	headers  []metadata.MD
}

func newServer(t *testing.T) *server {
	s := &server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	s.gs = grpc.NewServer()
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = append(s.headers, md)
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			s.requests = append(s.requests, r)
			s.mu.Unlock()
			return nil
		},
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.gs, serverv3.NewServer(context.Background(), s.cache, cb))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	go func() { _ = s.gs.Serve(l) }()
	t.Cleanup(s.gs.Stop)
	return s
}

func (s *server) set(t *testing.T, version string, configs ...*rlsconfv3.RateLimitConfig) {
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), "node", snap); err != nil {
		t.Fatal(err)
	}
}

func (s *server) nacks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.GetErrorDetail() != nil {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRefusedConfigIsNotResentInALoop: go-control-plane's cache sends a
// refused snapshot again at once; the client refuses it again, paced, and
// takes the next good version.
func TestRefusedConfigIsNotResentInALoop(t *testing.T) {
	if n := refusals(t); n > 3 {
		t.Fatalf("%d NACKs of one refused version in 1.5s: a resend loop", n)
	}
	// Control: without the pacing, the loop is there and seen.
	defer func(d time.Duration) { firstRepeatedNack = d }(firstRepeatedNack)
	firstRepeatedNack = 0
	if n := refusals(t); n <= 3 {
		t.Fatalf("without pacing only %d NACKs in 1.5s: the test would not see a loop", n)
	}
}

// refusals serves a refused version, counts the NACKs for 1.5s, then
// checks that the next good version is applied.
func refusals(t *testing.T) int {
	s := newServer(t)
	var mu sync.Mutex
	var applied []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ServerURL: s.addr, NodeID: "node", ConnectRetryInterval: 50 * time.Millisecond,
			Headers: map[string]string{"x-tenant": "t1"}, NodeMetadata: map[string]string{"zone": "z"},
			Backoff: Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
			Apply: func(c []*rlsconfv3.RateLimitConfig) error {
				if _, err := Compile(c, rls.NewRules); err != nil {
					return err
				}
				mu.Lock()
				applied = append(applied, c[0].GetDomain())
				mu.Unlock()
				return nil
			}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	bad := &rlsconfv3.RateLimitConfig{Name: "r", Domain: "bad", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1)}}}
	s.set(t, "1", bad)
	waitFor(t, "a NACK", func() bool { return s.nacks() >= 1 })
	time.Sleep(1500 * time.Millisecond) // a fixed span to count NACKs in, not a wait for a condition
	n := s.nacks()
	s.set(t, "2", &rlsconfv3.RateLimitConfig{Name: "r", Domain: "good"})
	waitFor(t, "the good version applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(applied) == 1 && applied[0] == "good" })

	s.mu.Lock()
	defer s.mu.Unlock()
	if got := s.headers[0].Get("x-tenant"); len(got) != 1 || got[0] != "t1" {
		t.Fatalf("additional headers: %v", s.headers[0])
	}
	first := s.requests[0]
	if first.GetNode().GetId() != "node" || first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "z" || first.GetTypeUrl() != TypeURL {
		t.Fatalf("first request: %v", first)
	}
	return n
}

// TestRunOptions refuses options it cannot use.
func TestRunOptions(t *testing.T) {
	apply := func([]*rlsconfv3.RateLimitConfig) error { return nil }
	for _, o := range []Options{
		{NodeID: "n", Apply: apply, ConnectRetryInterval: time.Second, Backoff: Backoff{Initial: time.Second, Max: time.Second}},
		{ServerURL: "x:1", Apply: apply, ConnectRetryInterval: time.Second, Backoff: Backoff{Initial: time.Second, Max: time.Second}},
		{ServerURL: "x:1", NodeID: "n", Apply: apply, Backoff: Backoff{Initial: time.Second, Max: time.Second}},
		{ServerURL: "x:1", NodeID: "n", Apply: apply, ConnectRetryInterval: time.Second, Backoff: Backoff{Initial: 2 * time.Second, Max: time.Second}},
	} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestEmptySnapshot: a control plane with no rate limit yet (Envoy
// Gateway before any policy) sends an empty set, which is a configuration:
// no domain limited.
func TestEmptySnapshot(t *testing.T) {
	s := newServer(t)
	s.set(t, "1")
	got := make(chan int, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ServerURL: s.addr, NodeID: "node", ConnectRetryInterval: 50 * time.Millisecond,
			Backoff: Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
			Apply: func(c []*rlsconfv3.RateLimitConfig) error {
				got <- len(c)
				return nil
			}})
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case n := <-got:
		if n != 0 {
			t.Fatalf("%d resources in an empty snapshot", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an empty snapshot was never delivered")
	}
}

package rls

import (
	"context"
	"net"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Register serves the service over gRPC, as Envoy calls it.
func TestRegisterServesGRPC(t *testing.T) {
	h := newHarness(t, memStore(t), basicYAML)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	Register(srv, h.svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	resp, err := client.ShouldRateLimit(context.Background(), request("basic", 0, desc("key1", "value1")))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "over gRPC", resp.GetStatuses()[0], ok, 49, -1)
	if _, err := client.ShouldRateLimit(context.Background(), request("", 0, desc("key1", "value1"))); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty domain: %v; want InvalidArgument", err)
	}
}

package grpclimit_test

import (
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

func Example() {
	store, _ := memorystore.New()
	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "rpc:"})
	if err != nil {
		log.Fatal(err)
	}
	// Per API key when the client sends one, else per peer address;
	// health checks are never limited.
	rl, err := grpclimit.New(lim,
		grpclimit.WithKey(grpclimit.FirstOf(grpclimit.Metadata("x-api-key"), grpclimit.PeerAddr())),
		grpclimit.WithoutMethods("/grpc.health.v1.Health/*"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rl.Unary()), grpc.ChainStreamInterceptor(rl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := rl.Validate(srv); err != nil {
		log.Fatal(err) // a pattern names no registered method
	}
	fmt.Println("ready")
	// srv.Serve(lis)
	// Output: ready
}

func ExampleRetryUnary() {
	retry, err := grpclimit.RetryUnary(grpclimit.WithMaxRetries(3), grpclimit.WithMaxDelay(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// Denied calls wait the server's RetryInfo delay and try again.
	_ = grpc.WithChainUnaryInterceptor(retry) // a grpc.NewClient option
	fmt.Println("ok")
	// Output: ok
}

// Command limitkit-rls is an Envoy rate limit service on limitkit's stores
// and algorithms, a drop-in for envoyproxy/ratelimit: the same YAML, read
// from the same runtime directory, and the same environment (see
// docs/rls.md for the variables).
//
//	RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit REDIS_SOCKET_TYPE=tcp REDIS_URL=localhost:6379 \
//		go run ./rls/cmd/limitkit-rls
//
// It serves envoy.service.ratelimit.v3.RateLimitService and gRPC health on
// GRPC_PORT (8081), /healthcheck and POST /json on PORT (8080), pprof and
// /metrics on DEBUG_PORT (6070). SIGTERM or SIGINT turns health to
// NOT_SERVING and drains the calls in flight.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.LookupEnv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "limitkit-rls:", err)
		stop()
		os.Exit(1)
	}
}

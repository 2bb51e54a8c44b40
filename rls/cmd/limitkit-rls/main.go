// Command limitkit-rls is an Envoy rate limit service on limitkit's stores
// and algorithms, a drop-in for envoyproxy/ratelimit: the same YAML, read
// from the same runtime directory or received over xDS (CONFIG_TYPE=GRPC_XDS_SOTW,
// as Envoy Gateway sends it), and the same environment (see docs/rls.md for
// the variables). RUNTIME_WATCH_ROOT=false reloads a file edited in place;
// the reference's default (true) watches only for the directory swapped
// under RUNTIME_ROOT, as a symlink flip.
//
//	go install github.com/limitkit/limitkit/rls/cmd/limitkit-rls@latest
//	RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false REDIS_SOCKET_TYPE=tcp REDIS_URL=localhost:6379 limitkit-rls
//
// It serves envoy.service.ratelimit.v3.RateLimitService and gRPC health on
// GRPC_PORT (8081), /healthcheck and POST /json on PORT (8080), pprof and
// /metrics on DEBUG_PORT (6070). SIGTERM or SIGINT turns health to
// NOT_SERVING and drains the calls in flight. It takes no arguments; the
// flags -version and -h print the version or a usage text and exit.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if done, code := parseFlags(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runEnv(ctx, os.LookupEnv, os.Environ(), os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "limitkit-rls:", err)
		stop()
		os.Exit(1)
	}
}

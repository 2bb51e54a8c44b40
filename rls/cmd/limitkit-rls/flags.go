package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// usage is the help text; the service is configured by its environment,
// as envoyproxy/ratelimit is, so the flags only ask about the binary.
const usage = `limitkit-rls: an Envoy rate limit service on limitkit, a drop-in for envoyproxy/ratelimit.

Usage:
  limitkit-rls            serve, configured by environment variables
  limitkit-rls -version   print the version and exit
  limitkit-rls -h         print this help and exit

It reads the rate limit YAML from $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config
and serves envoy.service.ratelimit.v3.RateLimitService on GRPC_PORT (8081),
/healthcheck and POST /json on PORT (8080), /metrics and pprof on DEBUG_PORT
(6070). The store: REDIS_SOCKET_TYPE=tcp REDIS_URL=host:port (the reference's
variables), or LIMITKIT_BACKEND_URL (redis://, rediss://, redis+cluster://,
redis+sentinel://, memory://); with neither, it counts in memory.
Every variable: https://github.com/limitkit/limitkit/blob/main/docs/rls.md
`

// errNoArgs is returned for positional arguments.
var errNoArgs = errors.New("limitkit-rls takes no arguments; it is configured by environment variables (limitkit-rls -h)")

// parseFlags reads the command line. It returns done when the command has
// answered (-version, -h) and must exit with code without serving.
func parseFlags(args []string, stdout, stderr io.Writer) (done bool, code int) {
	fs := flag.NewFlagSet("limitkit-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // printed below: in full to stdout when asked for
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// Asked for: to standard output, and not a failure.
		fmt.Fprint(stdout, usage, "\nFlags:\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return true, 0
	case err != nil:
		// The flag package has printed what was wrong.
		fmt.Fprintln(stderr, "limitkit-rls -h prints the usage")
		return true, 2
	case fs.NArg() > 0:
		fmt.Fprintln(stderr, errNoArgs)
		return true, 2
	case *showVersion:
		fmt.Fprintln(stdout, "limitkit-rls", version())
		return true, 0
	}
	return false, 0
}

// version is the binary's module version, as go install stamps it
// (limitkit-rls@v0.1.0 prints v0.1.0), or "(devel)" for a build from a
// checkout without one.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Command release tags every published module of the repository at one
// version, in the local repository only (it never pushes):
//
//	go run ./internal/dev/release v0.1.0
//
// The published modules are those whose directory has no internal element:
// the root, rls, limiter/grpclimit and backend/observe/otelobserve.
// Development keeps go.work and `replace ../..` directives so that the
// modules build against each other's working copies; a user's `go get`
// ignores a dependency's replace, and `go install pkg@version` refuses a
// module that has one. So the tool makes one release commit beside the
// current branch (a child of HEAD that no branch points at): in it each
// nested module requires its siblings at the version, with no replace, and
// its go.sum holds their checksums. It then tags that commit once per
// module (v0.1.0, rls/v0.1.0, limiter/grpclimit/v0.1.0, ...) and prints
// the push command. The branch and the working tree stay as they were.
//
// A sibling's checksum exists before anything is pushed because it is a
// function of the module's files alone: the tool builds each module's zip
// from the release tree exactly as the go command does from a tag
// (golang.org/x/mod/zip.CreateFromVCS, which runs git archive and adds the
// root LICENSE to a nested module) and hashes it (golang.org/x/mod/sumdb/dirhash).
// Modules are done in dependency order, so a module's zip, go.sum included,
// is final before a dependent records its checksum. Before tagging, it
// serves those zips from a file-system module proxy and loads every
// package, tests included, of each nested module on its own (GOWORK=off,
// -mod=readonly): a missing or wrong go.sum line fails there, not in a
// user's build.
//
// With -proxy DIR it leaves that proxy in DIR, to try the release before
// pushing.
//
// It refuses a version that is not canonical semantic versioning with a v
// prefix (v1.2.3, v0.1.0-rc.1), a major version above 1 (the module paths
// have no /vN suffix), a working tree with changes, a published module
// whose shipped code imports another module's internal package (the two
// may be built at different versions), and a tag that exists.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs the command with args and returns its exit code.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("release", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dir := flags.String("C", ".", "a directory inside the repository to release")
	proxy := flags.String("proxy", "", "also leave the module proxy of the release in this directory, to try it before pushing:\nGOPROXY=file://DIR,$(go env GOPROXY) GONOSUMDB=github.com/limitkit/limitkit")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/dev/release [-C dir] [-proxy dir] VERSION")
		fmt.Fprintln(stderr, "Tags every published module at VERSION (e.g. v0.1.0) in a release commit beside HEAD; never pushes.")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() != 1 {
		flags.Usage()
		return 2
	}
	r, err := Release(ctx, *dir, flags.Arg(0), *proxy, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	fmt.Fprintf(stdout, "release commit %s (a child of %s; no branch moved)\n", r.Commit, r.Parent)
	for _, t := range r.Tags {
		fmt.Fprintln(stdout, "tagged", t)
	}
	if *proxy != "" {
		fmt.Fprintf(stdout, "module proxy of the release in %s\n", *proxy)
	}
	fmt.Fprintf(stdout, "to publish: git push origin %s\n", joinTags(r.Tags))
	return 0
}

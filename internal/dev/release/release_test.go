package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

const version = "v0.1.0"

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.0.0", "v0.1.0-rc.1"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for v, want := range map[string]string{
		"":             "no VERSION",
		"0.1.0":        "needs a v prefix: v0.1.0",
		"v0.1":         "use v0.1.0",
		"v0.1.0+meta":  "use v0.1.0",
		"latest":       "not semantic versioning",
		"v2.0.0":       "/v2 suffix",
		"v0.1.0\nmain": "not semantic versioning",
	} {
		if err := checkVersion(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", v, err, want)
		}
	}
}

// clone copies the repository's HEAD into a temporary directory, with a
// git identity for the release commit and tags.
func clone(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	ctx := t.Context()
	src, err := git(ctx, ".", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not in a git checkout, nothing to release: %v", err)
	}
	// Only committed work is rehearsed: the clone is of HEAD.
	for _, args := range [][]string{
		{"init", "--quiet", dir},
		{"-C", dir, "fetch", "--quiet", "--no-tags", src, "HEAD"},
		{"-C", dir, "checkout", "--quiet", "--detach", "FETCH_HEAD"},
		{"-C", dir, "config", "user.name", "Release Test"},
		{"-C", dir, "config", "user.email", "release-test@example.com"},
	} {
		if _, err := git(ctx, ".", args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRefusals(t *testing.T) {
	repo := clone(t)
	ctx := t.Context()
	run := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := cli(ctx, append([]string{"-C", repo}, args...), &stdout, &stderr)
		return code, stderr.String()
	}
	if code, errs := run("0.1.0"); code != 1 || !strings.Contains(errs, "needs a v prefix") {
		t.Errorf("a version without v: code %d, %s", code, errs)
	}
	if code, errs := run(); code != 2 || !strings.Contains(errs, "usage:") {
		t.Errorf("no version: code %d, %s", code, errs)
	}

	// A dirty tree, then an existing tag: nothing is made.
	if err := os.WriteFile(filepath.Join(repo, "scratch.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, errs := run(version); code != 1 || !strings.Contains(errs, "working tree has changes") || !strings.Contains(errs, "scratch.txt") {
		t.Errorf("a dirty tree: code %d, %s", code, errs)
	}
	if err := os.Remove(filepath.Join(repo, "scratch.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := git(ctx, repo, "tag", "rls/"+version); err != nil {
		t.Fatal(err)
	}
	if code, errs := run(version); code != 1 || !strings.Contains(errs, "tag rls/"+version+" already exists") {
		t.Errorf("an existing tag: code %d, %s", code, errs)
	}
	if tags, _ := git(ctx, repo, "tag"); tags != "rls/"+version {
		t.Errorf("tags after the refusals: %q, want only the one made by the test", tags)
	}
}

// TestRehearsal releases a clone of HEAD, serves its tags from a
// file-system module proxy and uses each module as a user would, in a
// module of its own outside the repository.
func TestRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("the release rehearsal builds programs against every module; skipped with -short")
	}
	// About 3 minutes on a loaded 2-core machine, more than the suite's
	// budget for one package: .ci/run runs it in a step of its own.
	if os.Getenv("LIMITKIT_RELEASE_REHEARSAL") != "1" {
		t.Skip("the release rehearsal runs with LIMITKIT_RELEASE_REHEARSAL=1 (as .ci/run does, in a step of its own)")
	}
	if out, err := exec.Command("go", "env", "GOPROXY").Output(); err != nil || strings.TrimSpace(string(out)) == "off" {
		t.Skipf("no module proxy (go env GOPROXY: %q, %v): third-party modules cannot be fetched", out, err)
	}
	ctx := t.Context()
	repo := clone(t)
	head, err := git(ctx, repo, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	// The tool runs as built, outside this test binary: under the race
	// detector zipping the repository in process takes minutes.
	tool := filepath.Join(t.TempDir(), "release")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	proxy := t.TempDir()
	start := time.Now()
	out, err := exec.CommandContext(ctx, tool, "-C", repo, "-proxy", proxy, version).CombinedOutput()
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	t.Logf("release (%.1fs):\n%s", time.Since(start).Seconds(), out)

	// The branch and the working tree are as they were; the tags point at
	// one commit whose parent is HEAD.
	rootPath, all, err := modules(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	var published []Module
	for _, m := range all {
		if m.published() {
			published = append(published, m)
		}
	}
	wantTags := []string{version, "limiter/grpclimit/" + version, "backend/observe/otelobserve/" + version, "rls/" + version}
	var tags []string
	for _, m := range published {
		tags = append(tags, m.Tag(version))
	}
	slices.Sort(tags)
	slices.Sort(wantTags)
	if !slices.Equal(tags, wantTags) {
		t.Fatalf("published modules tag %v, want %v (internal/ modules are never published)", tags, wantTags)
	}
	if now, _ := git(ctx, repo, "rev-parse", "HEAD"); now != head {
		t.Errorf("HEAD moved from %s to %s", head, now)
	}
	if status, _ := git(ctx, repo, "status", "--porcelain"); status != "" {
		t.Errorf("the working tree changed:\n%s", status)
	}
	if wt, _ := git(ctx, repo, "worktree", "list"); strings.Count(wt, "\n") != 0 {
		t.Errorf("a worktree was left behind:\n%s", wt)
	}
	var commit string
	for _, tag := range wantTags {
		c, err := git(ctx, repo, "rev-parse", tag+"^{commit}")
		if err != nil {
			t.Fatal(err)
		}
		if commit != "" && c != commit {
			t.Errorf("tag %s at %s, others at %s", tag, c, commit)
		}
		commit = c
		// The tagged go.mod has no replace, and requires its siblings
		// at the version; the development one is untouched.
		m := published[slices.IndexFunc(published, func(m Module) bool { return m.Tag(version) == tag })]
		goMod, err := goModAt(ctx, repo, m, tag)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(goMod), "replace") {
			t.Errorf("%s: go.mod has a replace:\n%s", tag, goMod)
		}
		if m.Dir != "" && !strings.Contains(string(goMod), rootPath+" "+version) {
			t.Errorf("%s: go.mod does not require %s %s:\n%s", tag, rootPath, version, goMod)
		}
	}
	if parent, _ := git(ctx, repo, "rev-parse", commit+"^"); parent != head {
		t.Errorf("the release commit's parent is %s, want HEAD %s", parent, head)
	}
	if dev, _ := gitRaw(ctx, repo, "cat-file", "blob", "HEAD:rls/go.mod"); !bytes.Contains(dev, []byte("replace")) {
		t.Errorf("the development rls/go.mod lost its replace")
	}

	// The proxy the tool left serves the tags' modules: their go.mod, and
	// for rls (a nested module, which gets the root's LICENSE) the zip
	// the go command's own code (zip.CreateFromVCS) makes from the tag.
	for _, m := range published {
		esc, _ := module.EscapePath(m.Path)
		served, err := os.ReadFile(filepath.Join(proxy, esc, "@v", version+".mod"))
		if err != nil {
			t.Fatal(err)
		}
		if tagged, _ := goModAt(ctx, repo, m, m.Tag(version)); !bytes.Equal(served, tagged) {
			t.Errorf("%s: the proxy's go.mod is not the tag's:\n%s", m.Path, served)
		}
		if m.Dir != "rls" {
			continue
		}
		f, err := os.CreateTemp(t.TempDir(), "*.zip")
		if err != nil {
			t.Fatal(err)
		}
		if err := zip.CreateFromVCS(f, module.Version{Path: m.Path, Version: version}, repo, m.Tag(version), m.Dir); err != nil {
			t.Fatal(err)
		}
		f.Close()
		want, err := dirhash.HashZip(f.Name(), dirhash.Hash1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dirhash.HashZip(filepath.Join(proxy, esc, "@v", version+".zip"), dirhash.Hash1)
		if err != nil || got != want {
			t.Errorf("%s: the proxy's zip hashes to %s (%v), zip.CreateFromVCS's of the tag to %s", m.Path, got, err, want)
		}
	}

	// Control: the tool's own check fails on a go.sum whose checksum of
	// the root module is not that of the zip served.
	tampered := filepath.Join(t.TempDir(), "tampered")
	if _, err := git(ctx, repo, "worktree", "add", "--quiet", "--detach", tampered, "rls/"+version); err != nil {
		t.Fatal(err)
	}
	sumFile := filepath.Join(tampered, "rls", "go.sum")
	sum, err := os.ReadFile(sumFile)
	if err != nil {
		t.Fatal(err)
	}
	line := rootPath + " " + version + " h1:"
	i := bytes.Index(sum, []byte(line))
	if i < 0 {
		t.Fatalf("rls/go.sum at the tag has no %q line:\n%s", line, sum)
	}
	sum = slices.Concat(sum[:i+len(line)], []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="), sum[i+len(line)+44:])
	if err := os.WriteFile(sumFile, sum, 0o644); err != nil {
		t.Fatal(err)
	}
	rls := published[slices.IndexFunc(published, func(m Module) bool { return m.Dir == "rls" })]
	if err := checkModules(ctx, tampered, proxy, rootPath, []Module{rls}); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("the check on a tampered go.sum: %v, want a checksum mismatch", err)
	}

	env, err := ProxyEnv(ctx, proxy, rootPath, filepath.Join(t.TempDir(), "modcache"))
	if err != nil {
		t.Fatal(err)
	}
	// -trimpath: third-party packages compile once for every rehearsal,
	// whatever the temporary module cache's path.
	env = append(env, "GOFLAGS=-modcacherw -trimpath", "GOBIN="+filepath.Join(t.TempDir(), "bin"))
	goCmd := func(t *testing.T, dir string, args ...string) string {
		t.Helper()
		start := time.Now()
		// A bound on each command, so that a hung download fails here
		// with its command named, not in the test binary's timeout.
		cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in %s: go %s: %v\n%s", filepath.Base(dir), strings.Join(args, " "), err, out)
		}
		t.Logf("go %s: %.1fs", strings.Join(args, " "), time.Since(start).Seconds())
		return string(out)
	}
	users := t.TempDir() // outside the repository
	for _, p := range programs {
		t.Run(p.name, func(t *testing.T) {
			dir := filepath.Join(users, p.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			goCmd(t, dir, "mod", "init", "example.com/"+p.name)
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.source), 0o644); err != nil {
				t.Fatal(err)
			}
			var get []string
			for _, m := range p.modules {
				get = append(get, m+"@"+version)
			}
			goCmd(t, dir, append([]string{"get"}, get...)...)
			goCmd(t, dir, "mod", "tidy")
			goMod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
			for _, m := range p.modules {
				if !strings.Contains(string(goMod), m+" "+version) {
					t.Errorf("go.mod does not require %s %s:\n%s", m, version, goMod)
				}
			}
			goCmd(t, dir, "vet", ".")
			goCmd(t, dir, "build", "-o", "prog", ".")
			out, err := exec.CommandContext(ctx, filepath.Join(dir, "prog")).CombinedOutput()
			if err != nil || string(out) != p.want {
				t.Errorf("running it: %v, printed %q, want %q", err, out, p.want)
			}
		})
	}

	// go install refuses a module with a replace, and stamps the version.
	goCmd(t, users, "install", rootPath+"/rls/cmd/limitkit-rls@"+version)
	bin := filepath.Join(env[len(env)-1][len("GOBIN="):], "limitkit-rls")
	out, err = exec.CommandContext(ctx, bin, "-version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "limitkit-rls "+version {
		t.Errorf("limitkit-rls -version: %v, %q, want %q", err, out, "limitkit-rls "+version)
	}
	startService(t, bin)
}

// startService runs an installed limitkit-rls on the in-memory store and
// free loopback ports until it logs that it listens, then stops it.
func startService(t *testing.T, bin string) {
	rt := t.TempDir()
	config := filepath.Join(rt, "ratelimit", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	if err := os.WriteFile(filepath.Join(config, "rl.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"BACKEND_TYPE=memory", "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log []string
	listening, versioned := false, false
	timeout := time.After(60 * time.Second)
	for !listening {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("limitkit-rls exited before listening: %v\n%s", cmd.Wait(), strings.Join(log, "\n"))
			}
			log = append(log, l)
			listening = strings.Contains(l, "msg=listening")
			versioned = versioned || strings.Contains(l, "version="+version)
		case <-timeout:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("limitkit-rls not listening within 60 s:\n%s", strings.Join(log, "\n"))
		}
	}
	if !versioned {
		t.Errorf("no start-up line with version=%s:\n%s", version, strings.Join(log, "\n"))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("limitkit-rls after SIGTERM: %v\n%s", err, strings.Join(log, "\n"))
	}
}

// programs are what users write against each module: alone, and all
// together. Each prints a fixed line when it works.
var programs = []struct {
	name    string
	modules []string
	source  string
	want    string
}{
	{
		name:    "core",
		modules: []string{"github.com/limitkit/limitkit"},
		want:    "true true false\n",
		source: `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	lim, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	var got []any
	for range 3 {
		d, err := lim.Allow(context.Background(), "alice")
		if err != nil {
			panic(err)
		}
		got = append(got, d.Allowed)
	}
	fmt.Println(got...)
}
`,
	},
	{
		name:    "grpclimit",
		modules: []string{"github.com/limitkit/limitkit/limiter/grpclimit"},
		want:    "grpclimit ready\n",
		source: `package main

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

func main() {
	store, _ := memorystore.New()
	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	rl, err := grpclimit.New(lim, grpclimit.WithKey(grpclimit.PeerAddr()))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rl.Unary()))
	defer srv.Stop()
	fmt.Println("grpclimit ready")
}
`,
	},
	{
		name:    "otelobserve",
		modules: []string{"github.com/limitkit/limitkit/backend/observe/otelobserve"},
		want:    "otelobserve ready\n",
		source: `package main

import (
	"fmt"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/limitkit/limitkit/backend/observe/otelobserve"
)

func main() {
	if _, err := otelobserve.New(noop.NewMeterProvider()); err != nil {
		panic(err)
	}
	fmt.Println("otelobserve ready")
}
`,
	},
	{
		name:    "rls",
		modules: []string{"github.com/limitkit/limitkit/rls"},
		want:    "[edge]\n",
		source: `package main

import (
	"fmt"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/rls"
)

const config = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"

func main() {
	rules, err := rls.NewRules(rls.File{Name: "edge.yaml", Data: []byte(config)})
	if err != nil {
		panic(err)
	}
	store, _ := memorystore.New()
	if _, err := rls.New(store, rules); err != nil {
		panic(err)
	}
	fmt.Println(rules.Domains())
}
`,
	},
	{
		name: "together",
		modules: []string{"github.com/limitkit/limitkit", "github.com/limitkit/limitkit/rls",
			"github.com/limitkit/limitkit/limiter/grpclimit", "github.com/limitkit/limitkit/backend/observe/otelobserve"},
		want: "together ready\n",
		source: `package main

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/otelobserve"
	"github.com/limitkit/limitkit/rls"
)

func main() {
	metrics, err := otelobserve.New(noop.NewMeterProvider())
	if err != nil {
		panic(err)
	}
	mem, _ := memorystore.New()
	store := observe.Wrap(mem, metrics.Observer())
	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	if _, err := grpclimit.New(lim); err != nil {
		panic(err)
	}
	rules, err := rls.NewRules(rls.File{Name: "edge.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err != nil {
		panic(err)
	}
	if _, err := rls.New(store, rules); err != nil {
		panic(err)
	}
	fmt.Println("together ready")
}
`,
	},
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Module is one module of the repository.
type Module struct {
	Path string // module path, e.g. github.com/limitkit/limitkit/rls
	Dir  string // its directory from the repository root, slash-separated; "" for the root
}

// Tag is the module's tag for version: the version itself for the root
// module, dir/version for a nested one (the form the go command looks up).
func (m Module) Tag(version string) string {
	if m.Dir == "" {
		return version
	}
	return m.Dir + "/" + version
}

// published reports whether users can depend on the module: a module under
// an internal directory (internal/dev/benchmarks, internal/dev/release) can only be
// imported from inside this repository, so it is neither rewritten nor
// tagged and keeps its replace.
func (m Module) published() bool {
	return !slices.Contains(strings.Split(m.Dir, "/"), "internal")
}

// Result is what Release made.
type Result struct {
	Parent  string   // the commit the release commit is a child of (HEAD)
	Commit  string   // the release commit
	Tags    []string // the tags made, the root module's first
	Modules []Module // the published modules, in dependency order
	Sums    map[string]Sums
}

// Sums are a module's go.sum checksums at the release version.
type Sums struct {
	Zip   string // h1 of the module zip (the "path version h1:" line)
	GoMod string // h1 of its go.mod (the "path version/go.mod h1:" line)
}

// checkVersion accepts a canonical semantic version with a v prefix whose
// major version is 0 or 1.
func checkVersion(v string) error {
	if v == "" {
		return errors.New("no VERSION given; pass one such as v0.1.0")
	}
	if !strings.HasPrefix(v, "v") && semver.IsValid("v"+v) {
		return fmt.Errorf("version %q needs a v prefix: v%s", clip(v), clip(v))
	}
	if !semver.IsValid(v) {
		return fmt.Errorf("version %q is not semantic versioning; use vMAJOR.MINOR.PATCH, e.g. v0.1.0 or v0.1.0-rc.1", clip(v))
	}
	if c := semver.Canonical(v); c != v {
		return fmt.Errorf("version %q is not in canonical form; use %s (all three numbers, no +build suffix)", clip(v), c)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %s has major version %s: the module paths would need a /%s suffix; this tool tags v0 and v1 only", v, m, m)
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// git runs git in dir and returns its trimmed standard output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitRaw(ctx, dir, args...)
	return strings.TrimSpace(string(out)), err
}

// gitRaw runs git in dir and returns its standard output as it is.
func gitRaw(ctx context.Context, dir string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// modules lists the modules of the repository at root, from their go.mod
// files in git, the root module first.
func modules(ctx context.Context, root string) (rootPath string, mods []Module, err error) {
	out, err := git(ctx, root, "ls-files", "--", "go.mod", "*/go.mod")
	if err != nil {
		return "", nil, err
	}
	for _, file := range strings.Fields(out) {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return "", nil, err
		}
		p := modfile.ModulePath(data)
		if p == "" {
			return "", nil, fmt.Errorf("%s names no module", file)
		}
		dir := path.Dir(file)
		if dir == "." {
			dir = ""
		}
		mods = append(mods, Module{Path: p, Dir: dir})
	}
	i := slices.IndexFunc(mods, func(m Module) bool { return m.Dir == "" })
	if i < 0 {
		return "", nil, errors.New("no go.mod at the repository root")
	}
	rootPath = mods[i].Path
	mods[0], mods[i] = mods[i], mods[0]
	for _, m := range mods[1:] {
		// The go command finds a nested module's versions under tags
		// dir/vX.Y.Z only when its path is the root's path plus dir.
		if want := rootPath + "/" + m.Dir; m.Path != want {
			return "", nil, fmt.Errorf("%s/go.mod declares module %s; a module in %s of %s must be %s to be found by its tags", m.Dir, m.Path, m.Dir, rootPath, want)
		}
	}
	return rootPath, mods, nil
}

// Release tags every published module of the repository containing dir at
// version; progress goes to log. When proxyDir is not empty, the module
// proxy it checks the release against is left there. See the command's
// documentation.
func Release(ctx context.Context, dir, version, proxyDir string, log io.Writer) (*Result, error) {
	root, rootPath, mods, err := preflight(ctx, dir, version)
	if err != nil {
		return nil, err
	}
	res := &Result{Sums: map[string]Sums{}}
	if res.Parent, err = git(ctx, root, "rev-parse", "HEAD"); err != nil {
		return nil, err
	}
	work, remove, err := addWorktree(ctx, root, res.Parent)
	if err != nil {
		return nil, err
	}
	defer remove()
	if err := commitRelease(ctx, work, rootPath, mods, version, res); err != nil {
		return nil, err
	}
	if err := checkRelease(ctx, root, work, proxyDir, rootPath, version, res, log); err != nil {
		return nil, err
	}
	for _, m := range res.Modules {
		t := m.Tag(version)
		if _, err := git(ctx, root, "tag", "-a", "-m", m.Path+" "+version, t, res.Commit); err != nil {
			return res, fmt.Errorf("tagging %s (tags made so far: %s): %w", t, joinTags(res.Tags), err)
		}
		res.Tags = append(res.Tags, t)
	}
	return res, nil
}

// preflight checks that version and the repository containing dir can be
// released: a clean working tree, no module importing another's internal
// packages, and no tag of version yet. It returns
// the repository's root directory, its root module path and its published
// modules.
func preflight(ctx context.Context, dir, version string) (root, rootPath string, mods []Module, err error) {
	if err := checkVersion(version); err != nil {
		return "", "", nil, err
	}
	root, err = git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", nil, fmt.Errorf("not inside a git repository: %w", err)
	}
	status, err := git(ctx, root, "status", "--porcelain")
	if err != nil {
		return "", "", nil, err
	}
	if status != "" {
		lines := strings.Split(status, "\n")
		if len(lines) > 10 {
			lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
		}
		return "", "", nil, fmt.Errorf("the working tree has changes; commit or stash them, so that the release is a commit others can check out:\n%s", strings.Join(lines, "\n"))
	}
	rootPath, all, err := modules(ctx, root)
	if err != nil {
		return "", "", nil, err
	}
	if err := checkWalls(root, all); err != nil {
		return "", "", nil, err
	}
	for _, m := range all {
		if m.published() {
			mods = append(mods, m)
		}
	}
	for _, m := range mods {
		t := m.Tag(version)
		if at, err := git(ctx, root, "rev-parse", "--verify", "--quiet", "refs/tags/"+t+"^{commit}"); err == nil {
			return "", "", nil, fmt.Errorf("tag %s already exists (at %.12s); choose another VERSION, or delete the tag (git tag -d %s) if it was never pushed", t, at, t)
		}
	}
	return root, rootPath, mods, nil
}

// addWorktree adds a worktree of root detached at commit, in which the
// release commit is made, so that the branch and the working tree are
// never touched. remove removes it.
func addWorktree(ctx context.Context, root, commit string) (work string, remove func(), err error) {
	tmp, err := os.MkdirTemp("", "limitkit-release-")
	if err != nil {
		return "", nil, err
	}
	work = filepath.Join(tmp, "tree")
	if _, err := git(ctx, root, "worktree", "add", "--quiet", "--detach", work, commit); err != nil {
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return work, func() {
		// A fresh context: the cleanup must run even after an interrupt.
		_, _ = git(context.Background(), root, "worktree", "remove", "--force", work)
		os.RemoveAll(tmp)
	}, nil
}

// commitRelease makes the release commit in work: every module of mods
// requires its siblings at version, with their checksums. It fills res's
// Modules (in dependency order), Sums and Commit.
func commitRelease(ctx context.Context, work, rootPath string, mods []Module, version string, res *Result) error {
	deps, err := rewriteGoMods(work, rootPath, mods, version)
	if err != nil {
		return err
	}
	if res.Modules, err = dependencyOrder(mods, deps); err != nil {
		return err
	}
	// Each module in dependency order: its go.sum gets its siblings'
	// checksums (already final), then its own zip is hashed from the tree.
	for _, m := range res.Modules {
		if err := addSums(work, m, closure(m.Path, deps), version, res.Sums); err != nil {
			return err
		}
		if _, err := git(ctx, work, "add", "--all"); err != nil {
			return err
		}
		tree, err := git(ctx, work, "write-tree")
		if err != nil {
			return err
		}
		if res.Sums[m.Path], err = hashModule(ctx, work, m, version, tree); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("release %s\n\nEach published module requires its siblings at %s, with no replace\ndirectives, and lists their checksums in go.sum. Made by internal/dev/release.\n", version, version)
	if _, err := git(ctx, work, "commit", "--quiet", "--no-verify", "-m", msg); err != nil {
		return fmt.Errorf("making the release commit (is git's user.name and user.email set?): %w", err)
	}
	res.Commit, err = git(ctx, work, "rev-parse", "HEAD")
	return err
}

// checkRelease serves the release commit from a module proxy, as the go
// command would see it once the tags are pushed (in proxyDir, or a
// temporary directory when empty), checks its checksums are those the
// go.sum files hold, and each module on its own against it.
func checkRelease(ctx context.Context, root, work, proxyDir, rootPath, version string, res *Result, log io.Writer) error {
	proxy := proxyDir
	var err error
	if proxy == "" {
		if proxy, err = os.MkdirTemp("", "limitkit-release-proxy-"); err != nil {
			return err
		}
		defer os.RemoveAll(proxy)
	} else if proxy, err = filepath.Abs(proxy); err != nil {
		return err
	}
	served, err := WriteProxy(ctx, root, proxy, res.Modules, version, res.Commit)
	if err != nil {
		return err
	}
	for _, m := range res.Modules {
		if served[m.Path] != res.Sums[m.Path] {
			return fmt.Errorf("%s: the zip of the release commit hashes to %v, its tree to %v", m.Path, served[m.Path], res.Sums[m.Path])
		}
	}
	fmt.Fprintf(log, "release: checking each module on its own against a proxy serving %s\n", version)
	return checkModules(ctx, work, proxy, rootPath, res.Modules)
}

// joinTags lists tags for a command line.
func joinTags(tags []string) string { return strings.Join(tags, " ") }

// rewriteGoMods makes each published module in work require its published
// siblings at version and drops its replace directives of them. It returns
// each module's direct published siblings.
func rewriteGoMods(work, rootPath string, mods []Module, version string) (map[string][]string, error) {
	published := map[string]bool{}
	for _, m := range mods {
		published[m.Path] = true
	}
	deps := map[string][]string{}
	for _, m := range mods {
		file := filepath.Join(work, filepath.FromSlash(m.Dir), "go.mod")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range f.Require {
			p := r.Mod.Path
			if published[p] {
				if err := f.AddRequire(p, version); err != nil {
					return nil, err
				}
				deps[m.Path] = append(deps[m.Path], p)
			} else if strings.HasPrefix(p, rootPath+"/") || p == rootPath {
				return nil, fmt.Errorf("%s requires %s, which is not published (its directory is internal); a published module cannot depend on it", m.Path, p)
			}
		}
		for _, r := range slices.Clone(f.Replace) {
			if published[r.Old.Path] {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return nil, err
				}
			}
		}
		f.Cleanup() // drops the emptied entries
		// go install pkg@version refuses a module with either, and a
		// user's build ignores them: they would only mislead.
		if len(f.Replace) > 0 {
			return nil, fmt.Errorf("%s/go.mod replaces %s, which is not a sibling module; remove the replace before releasing (users never see it, and go install refuses it)", dirName(m), f.Replace[0].Old.Path)
		}
		if len(f.Exclude) > 0 {
			return nil, fmt.Errorf("%s/go.mod excludes %s; remove the exclude before releasing (go install refuses it)", dirName(m), f.Exclude[0].Mod)
		}
		out, err := f.Format()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, out, 0o644); err != nil {
			return nil, err
		}
	}
	return deps, nil
}

// dirName names a module's directory in messages.
func dirName(m Module) string {
	if m.Dir == "" {
		return "."
	}
	return m.Dir
}

// dependencyOrder sorts mods so that each comes after the siblings it
// requires.
func dependencyOrder(mods []Module, deps map[string][]string) ([]Module, error) {
	byPath := map[string]Module{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(p string, chain []string) error
	visit = func(p string, chain []string) error {
		switch state[p] {
		case 1:
			return fmt.Errorf("the modules require each other in a cycle: %s", strings.Join(append(chain, p), " -> "))
		case 2:
			return nil
		}
		state[p] = 1
		for _, d := range deps[p] {
			if err := visit(d, append(chain, p)); err != nil {
				return err
			}
		}
		state[p] = 2
		order = append(order, byPath[p])
		return nil
	}
	for _, m := range mods {
		if err := visit(m.Path, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// closure is every sibling p requires, directly or through another sibling.
func closure(p string, deps map[string][]string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(q string) {
		for _, d := range deps[q] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(p)
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

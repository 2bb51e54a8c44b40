package main

import (
	stdzip "archive/zip"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// zipModule writes module m at version, as it is in rev (a commit or a
// tree of the repository at repo), to file: the zip the go command makes
// from a tag (see moduleFiles).
func zipModule(ctx context.Context, repo string, m Module, version, rev, file string) error {
	files, err := moduleFiles(ctx, repo, m, rev)
	if err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	err = zip.Create(f, module.Version{Path: m.Path, Version: version}, files)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zipping %s: %w", m.Path, err)
	}
	return nil
}

// moduleFiles lists the files of m in rev as the go command takes them
// from a tag: git archive's files under m's directory (zip.Create then
// leaves out nested modules), and for a nested module without a LICENSE
// the root's. This is zip.CreateFromVCS's logic, which accepts only a
// repository's main working tree, not a worktree such as the release's.
func moduleFiles(ctx context.Context, repo string, m Module, rev string) ([]zip.File, error) {
	args := []string{"-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", rev}
	if m.Dir != "" {
		args = append(args, m.Dir)
	}
	out, err := gitRaw(ctx, repo, args...)
	if err != nil {
		return nil, err
	}
	zr, err := stdzip.NewReader(bytes.NewReader(out), int64(len(out)))
	if err != nil {
		return nil, err
	}
	var files []zip.File
	haveLicense := false
	for _, zf := range zr.File {
		name := zf.Name
		if m.Dir != "" {
			var ok bool
			if name, ok = strings.CutPrefix(name, m.Dir+"/"); !ok {
				continue
			}
		}
		if name == "" || strings.HasSuffix(name, "/") {
			continue
		}
		files = append(files, archived{name: name, f: zf})
		haveLicense = haveLicense || name == "LICENSE"
	}
	if !haveLicense && m.Dir != "" {
		if data, err := gitRaw(ctx, repo, "cat-file", "blob", rev+":LICENSE"); err == nil {
			files = append(files, archived{name: "LICENSE", data: data})
		}
	}
	return files, nil
}

// archived is a file of git archive's zip, or data standing alone.
type archived struct {
	name string
	f    *stdzip.File
	data []byte
}

func (a archived) Path() string { return a.name }

func (a archived) Lstat() (os.FileInfo, error) {
	if a.f != nil {
		return a.f.FileInfo(), nil
	}
	return dataInfo{a}, nil
}

func (a archived) Open() (io.ReadCloser, error) {
	if a.f != nil {
		return a.f.Open()
	}
	return io.NopCloser(bytes.NewReader(a.data)), nil
}

// dataInfo describes an archived file given as data.
type dataInfo struct{ a archived }

func (i dataInfo) Name() string       { return path.Base(i.a.name) }
func (i dataInfo) Size() int64        { return int64(len(i.a.data)) }
func (i dataInfo) Mode() os.FileMode  { return 0o644 }
func (i dataInfo) ModTime() time.Time { return time.Time{} }
func (i dataInfo) IsDir() bool        { return false }
func (i dataInfo) Sys() any           { return nil }

// sumsOf hashes a module zip and its go.mod as go.sum does.
func sumsOf(zipFile string, goMod []byte) (Sums, error) {
	h, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		return Sums{}, err
	}
	gm, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(goMod)), nil
	})
	if err != nil {
		return Sums{}, err
	}
	return Sums{Zip: h, GoMod: gm}, nil
}

// goModAt reads m's go.mod in rev.
func goModAt(ctx context.Context, repo string, m Module, rev string) ([]byte, error) {
	return gitRaw(ctx, repo, "cat-file", "blob", rev+":"+path.Join(m.Dir, "go.mod"))
}

// hashModule returns the checksums of m at version as it is in rev.
func hashModule(ctx context.Context, repo string, m Module, version, rev string) (Sums, error) {
	tmp, err := os.CreateTemp("", "limitkit-module-*.zip")
	if err != nil {
		return Sums{}, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := zipModule(ctx, repo, m, version, rev, tmp.Name()); err != nil {
		return Sums{}, err
	}
	goMod, err := goModAt(ctx, repo, m, rev)
	if err != nil {
		return Sums{}, err
	}
	return sumsOf(tmp.Name(), goMod)
}

// WriteProxy lays out mods at version, as they are in rev of the repository
// at repo, as a file-system module proxy in dir (GOPROXY=file://dir):
// <module>/@v/list, .info, .mod and .zip, and returns their checksums.
func WriteProxy(ctx context.Context, repo, dir string, mods []Module, version, rev string) (map[string]Sums, error) {
	when, err := git(ctx, repo, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return nil, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return nil, err
	}
	sums := map[string]Sums{}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return nil, err
		}
		ev, err := module.EscapeVersion(version)
		if err != nil {
			return nil, err
		}
		v := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(v, 0o755); err != nil {
			return nil, err
		}
		goMod, err := goModAt(ctx, repo, m, rev)
		if err != nil {
			return nil, err
		}
		if err := zipModule(ctx, repo, m, version, rev, filepath.Join(v, ev+".zip")); err != nil {
			return nil, err
		}
		if sums[m.Path], err = sumsOf(filepath.Join(v, ev+".zip"), goMod); err != nil {
			return nil, err
		}
		for name, data := range map[string][]byte{ev + ".mod": goMod, ev + ".info": info, "list": []byte(version + "\n")} {
			if err := os.WriteFile(filepath.Join(v, name), data, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return sums, nil
}

// addSums puts the checksums of m's siblings deps at version into m's
// go.sum in work, replacing any lines for those versions.
func addSums(work string, m Module, deps []string, version string, sums map[string]Sums) error {
	if len(deps) == 0 {
		return nil
	}
	file := filepath.Join(work, filepath.FromSlash(m.Dir), "go.sum")
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	drop := map[string]bool{}
	var add []string
	for _, d := range deps {
		s, ok := sums[d]
		if !ok {
			return fmt.Errorf("internal error: %s is needed by %s before it was hashed", d, m.Path)
		}
		drop[d] = true
		add = append(add, d+" "+version+" "+s.Zip, d+" "+version+"/go.mod "+s.GoMod)
	}
	var lines []string
	for l := range strings.Lines(string(data)) {
		l = strings.TrimRight(l, "\n")
		if f := strings.Fields(l); len(f) == 3 && drop[f[0]] && strings.TrimSuffix(f[1], "/go.mod") == version {
			continue
		}
		if l != "" {
			lines = append(lines, l)
		}
	}
	lines = append(lines, add...)
	slices.SortStableFunc(lines, compareSumLines)
	return os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// compareSumLines orders go.sum lines as the go command writes them: by
// module path, then version, a version's zip line before its go.mod line.
func compareSumLines(a, b string) int {
	fa, fb := strings.Fields(a), strings.Fields(b)
	if len(fa) < 2 || len(fb) < 2 {
		return strings.Compare(a, b)
	}
	va, ma := strings.CutSuffix(fa[1], "/go.mod")
	vb, mb := strings.CutSuffix(fb[1], "/go.mod")
	return cmp.Or(strings.Compare(fa[0], fb[0]), semver.Compare(va, vb), compareBool(ma, mb))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// FileURL is a file:// URL for the directory dir, for GOPROXY.
func FileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

// ProxyEnv is the environment for go commands that must fetch the
// repository's modules from the file proxy at dir and everything else as
// usual: the proxy first, then the local module cache's download directory
// (itself a file proxy, so that modules already downloaded are not fetched
// again), then the module proxy `go env GOPROXY` names. The repository's
// modules are not in the checksum database before they are pushed
// (GONOSUMDB), and a module cache of their own (modCache) keeps the
// rehearsal's versions out of the user's.
func ProxyEnv(ctx context.Context, dir, rootPath, modCache string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(vals) != 2 {
		return nil, fmt.Errorf("go env printed %q", out)
	}
	goproxy, cache := strings.TrimSpace(vals[0]), strings.TrimSpace(vals[1])
	chain := []string{FileURL(dir)}
	if cache != "" {
		chain = append(chain, FileURL(filepath.Join(cache, "cache", "download")))
	}
	if goproxy != "" {
		chain = append(chain, goproxy)
	}
	return append(os.Environ(),
		"GOPROXY="+strings.Join(chain, ","),
		"GONOSUMDB="+rootPath,
		"GOMODCACHE="+modCache,
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		// -modcacherw: the module cache can be removed afterwards.
		"GOFLAGS=-modcacherw",
	), nil
}

// checkModules loads every package of each nested module in work, tests
// included, on its own (GOWORK=off) with -mod=readonly, its siblings
// coming from the file proxy at proxy: it fails when a go.sum lacks a line
// or holds a wrong one.
func checkModules(ctx context.Context, work, proxy, rootPath string, mods []Module) error {
	cache, err := os.MkdirTemp("", "limitkit-release-modcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	env, err := ProxyEnv(ctx, proxy, rootPath, cache)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if m.Dir == "" {
			continue // needs no sibling
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "go", "list", "-mod=readonly", "-deps", "-test", "./...")
		cmd.Dir = filepath.Join(work, filepath.FromSlash(m.Dir))
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(stderr.String())
			if len(msg) > 2000 {
				msg = msg[:2000] + "..."
			}
			return fmt.Errorf("%s does not load on its own at the release commit: %w\n%s", m.Dir, err, msg)
		}
	}
	return nil
}

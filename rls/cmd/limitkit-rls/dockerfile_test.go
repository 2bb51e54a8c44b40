package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildModules lists the modules of the packages the binary is built
// from, "path version" each ("path local" for the workspace's own and
// those replaced by a directory), as go lists them under env.
func buildModules(t *testing.T, env ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{with .Module}}{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{end}}`, "./cmd/limitkit-rls")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", env, err, out)
	}
	return parseModules(string(out))
}

func parseModules(out string) map[string]string {
	mods := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		path, version, _ := strings.Cut(strings.TrimSpace(line), " ")
		if path == "" || strings.HasPrefix(path, "go: ") {
			continue
		}
		if version == "" {
			version = "local"
		}
		mods[path] = version
	}
	return mods
}

// mismatches lists the modules built at another version than tested.
func mismatches(built, tested map[string]string) []string {
	var bad []string
	for path, v := range built {
		if w, ok := tested[path]; !ok || w != v {
			bad = append(bad, path+": the image builds "+v+", the tests use "+w+" (cd rls && GOWORK=off go get "+path+"@"+w+")")
		}
	}
	slices.Sort(bad)
	return bad
}

// TestDockerfileBuildsWhatWasTested: the image is built from rls/go.mod
// alone (GOWORK=off, as go install ...@version builds it), the tests from
// go.work, which may resolve a dependency higher (it did: genproto). Every
// module the binary is built from must be at one version in both.
func TestDockerfileBuildsWhatWasTested(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list twice")
	}
	// The control: a module at two versions is reported.
	if bad := mismatches(parseModules("a v1\nb v2\n"), parseModules("a v1\nb v3\n")); len(bad) != 1 || !strings.HasPrefix(bad[0], "b: ") {
		t.Fatalf("mismatches missed b: %v", bad)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "GOWORK=off go build") {
		t.Fatal("rls/Dockerfile no longer builds with GOWORK=off: update this test to the modules it builds from")
	}
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Skip("not in the workspace (GOWORK=off or no go.work): nothing to compare")
	}
	tested := buildModules(t)
	built := buildModules(t, "GOWORK=off")
	for _, m := range mismatches(built, tested) {
		t.Error(m)
	}
}

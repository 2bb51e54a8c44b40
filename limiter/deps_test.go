package limiter_test

import (
	"os/exec"
	"strings"
	"testing"
)

// thirdParty returns the packages outside the standard library and
// limitkit's module that the program in dir links.
func thirdParty(t *testing.T, dir string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the program's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", dir, err, out)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/limitkit/limitkit/") {
			found = append(found, p)
		}
	}
	return found
}

// TestCoreLinksNoThirdPartyCode keeps the promise that a program importing
// only limiter and memorystore links nothing but the standard library and
// limitkit: Redis clients, the breaker, metrics, gRPC and OpenTelemetry
// come in only with the packages that need them.
func TestCoreLinksNoThirdPartyCode(t *testing.T) {
	if found := thirdParty(t, "./testdata/coreonly"); len(found) > 0 {
		t.Errorf("a program importing only limiter and memorystore links third-party packages: %s", strings.Join(found, ", "))
	}
	// Control: the same program with Prometheus metrics is caught.
	found := thirdParty(t, "./testdata/withmetrics")
	if !strings.Contains(strings.Join(found, " "), "github.com/prometheus/client_golang/prometheus") {
		t.Errorf("the control links Prometheus, but the check found only %v", found)
	}
}

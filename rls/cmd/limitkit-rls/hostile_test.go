package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// aliasBomb is the few-kilobyte file whose YAML aliases expand to
// 10^10 descriptors: anchors under the ignored metadata key, each level a
// list of ten descriptors whose descriptors point at the level below.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: k\n    metadata:\n")
	for l := range 10 {
		fmt.Fprintf(&b, "      l%d: &l%d [", l, l)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			if l == 0 {
				fmt.Fprintf(&b, "{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}", i)
			} else {
				fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}", i, l-1)
			}
		}
		b.WriteString("]\n")
	}
	b.WriteString("    descriptors: *l9\n")
	return b.String()
}

// TestHostileRuntimeFiles: a named pipe and a symlink to /dev/zero in the
// runtime directory are skipped with a log line and later changes apply;
// an alias bomb is refused naming its file while the last good
// configuration stays in force; the service still stops on SIGTERM.
func TestHostileRuntimeFiles(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	in := start(t, baseEnv(root))

	if err := syscall.Mkfifo(filepath.Join(config, "x.yaml"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(config, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both logged as skipped", func() bool {
		logs := in.logs.String()
		return strings.Contains(logs, `msg="runtime file skipped" file=x.yaml reason="a named pipe`) &&
			strings.Contains(logs, `msg="runtime file skipped" file=zero.yaml reason="a device`)
	})
	writeFile(t, filepath.Join(config, "other.yaml"), otherDomain)
	eventually(t, "a change after them is applied", func() bool { return strings.Contains(in.domains(t), "domains: other, rl\n") })

	began := time.Now()
	writeFile(t, filepath.Join(config, "bomb.yaml"), aliasBomb())
	eventually(t, "the alias bomb refused", func() bool {
		return in.metric(t, "ratelimit_service_config_load_error") == "1"
	})
	t.Logf("alias bomb of %d bytes refused %v after it was written", len(aliasBomb()), time.Since(began).Round(time.Millisecond))
	if logs := in.logs.String(); !strings.Contains(logs, "bomb.yaml") || !strings.Contains(logs, "YAML aliases expand to more than") {
		t.Fatalf("the refusal does not name the file and the aliases:\n%s", logs)
	}
	if d := in.domains(t); !strings.Contains(d, "domains: other, rl\n") {
		t.Fatalf("after the alias bomb /rlconfig %q, want the last good domains", d)
	}
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v after the alias bomb", got)
	}
	if resp, err := in.ask("rl", []string{"foo"}); err != nil || resp.GetOverallCode().String() != "OK" {
		t.Fatalf("a call on the last good config: %v %v", resp, err)
	}
	if err := in.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

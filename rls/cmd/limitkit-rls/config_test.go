package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const perMinute = `domain: rl
descriptors:
  - key: foo
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

const otherDomain = `domain: other
descriptors:
  - key: bar
    rate_limit:
      unit: hour
      requests_per_unit: 5
`

// broken has an unknown key, which the reference refuses.
const broken = `domain: rl
descriptors:
  - key: foo
    rate_limt:
      unit: minute
`

func (in *instance) domains(t *testing.T) string {
	t.Helper()
	_, body := in.get(t, in.Debug, "/rlconfig")
	return body
}

// TestReloadKeepsLastGood: a write and a removal are applied; a broken
// file is refused with a log line and config_load_error, and the last good
// configuration stays in force (health included).
func TestReloadKeepsLastGood(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	in := start(t, baseEnv(root))
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v with a config loaded", got)
	}
	if code, body := in.get(t, in.HTTP, "/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck %d %q", code, body)
	}
	if d := in.domains(t); !strings.Contains(d, "domains: rl\n") {
		t.Fatalf("/rlconfig %q", d)
	}
	if v := in.metric(t, "ratelimit_service_config_load_success"); v != "1" {
		t.Fatalf("config_load_success %q after the first load", v)
	}

	writeFile(t, filepath.Join(config, "other.yaml"), otherDomain)
	eventually(t, "a new file is loaded", func() bool { return strings.Contains(in.domains(t), "domains: other, rl\n") })

	writeFile(t, filepath.Join(config, "other.yaml"), broken)
	eventually(t, "config_load_error counts the broken file", func() bool {
		return in.metric(t, "ratelimit_service_config_load_error") == "1"
	})
	if d := in.domains(t); !strings.Contains(d, "domains: other, rl\n") {
		t.Fatalf("after a broken file /rlconfig %q, want the last good domains", d)
	}
	if !strings.Contains(in.logs.String(), "rate_limt") || !strings.Contains(in.logs.String(), "last good one stays in force") {
		t.Fatalf("the log does not say what was refused and why:\n%s", in.logs)
	}
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v after a broken reload, want SERVING on the last good config", got)
	}

	if err := os.Remove(filepath.Join(config, "other.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a removal is applied", func() bool { return strings.Contains(in.domains(t), "domains: rl\n") })
}

// TestBrokenConfigAtStart refuses to start, saying which file and why.
func TestBrokenConfigAtStart(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), broken)
	logs := &syncBuffer{}
	err := run(t.Context(), lookupOf(baseEnv(root)), logs, nil)
	if err == nil {
		t.Fatal("started on a broken config")
	}
	for _, want := range []string{"rl.yaml", "rate_limt", "FORCE_START_WITHOUT_INITIAL_CONFIG"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	env := baseEnv(root)
	env["RUNTIME_ROOT"] = filepath.Join(root, "missing")
	if err := run(t.Context(), lookupOf(env), logs, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing runtime directory: %v", err)
	}
}

// TestForcedStart: FORCE_START_WITHOUT_INITIAL_CONFIG serves NOT_SERVING
// (gRPC health and /healthcheck) until a config loads.
func TestForcedStart(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), broken)
	env := baseEnv(root)
	env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true"
	in := start(t, env)
	if got := in.healthStatus(t); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health %v with no config", got)
	}
	if code, _ := in.get(t, in.HTTP, "/healthcheck"); code != 500 {
		t.Fatalf("/healthcheck %d with no config, want 500", code)
	}
	if _, err := in.ask("rl", []string{"foo", "x"}); err == nil {
		t.Fatal("ShouldRateLimit answered with no config loaded")
	}
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	eventually(t, "health turns SERVING once a config loads", func() bool {
		return in.healthStatus(t) == healthpb.HealthCheckResponse_SERVING
	})
	if code, _ := in.get(t, in.HTTP, "/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d with a config", code)
	}
}

// TestSymlinkSwap: with RUNTIME_WATCH_ROOT=true (the reference's default)
// a new root swapped in by a symlink is loaded; a write in place is not.
func TestSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "v1", "ratelimit", "config", "rl.yaml"), perMinute)
	writeFile(t, filepath.Join(base, "v2", "ratelimit", "config", "rl.yaml"), perMinute)
	writeFile(t, filepath.Join(base, "v2", "ratelimit", "config", "other.yaml"), otherDomain)
	current := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), current); err != nil {
		t.Fatal(err)
	}
	env := baseEnv(current)
	env["RUNTIME_WATCH_ROOT"] = "true"
	in := start(t, env)
	if d := in.domains(t); !strings.Contains(d, "domains: rl\n") || !strings.Contains(d, "files: config.rl.yaml") {
		t.Fatalf("/rlconfig %q", d)
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Symlink(filepath.Join(base, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the swapped root is loaded", func() bool { return strings.Contains(in.domains(t), "domains: other, rl\n") })
}

// TestShutdownHealth: once the context ends (SIGTERM), run returns nil
// and the listeners are closed.
func TestShutdownHealth(t *testing.T) {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	in := start(t, baseEnv(root))
	if err := in.stop(); err != nil {
		t.Fatalf("run after shutdown: %v", err)
	}
	if !strings.Contains(in.logs.String(), "NOT_SERVING") {
		t.Fatalf("no shutdown log line:\n%s", in.logs)
	}
}

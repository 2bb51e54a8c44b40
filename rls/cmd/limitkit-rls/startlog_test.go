package main

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// startLog runs the service with env (LOG_LEVEL left at its default)
// until it listens, and returns its log.
func startLog(t *testing.T, env map[string]string, environ []string) string {
	t.Helper()
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := runEnv(ctx, lookupOf(env), environ, out, func(addrs) { cancel() })
	if err != nil && ctx.Err() == nil {
		t.Fatalf("run: %v\nlogs:\n%s", err, out)
	}
	return out.String()
}

// quietEnv is baseEnv at the default LOG_LEVEL, with a config of one
// sliding_log limit.
func quietEnv(t *testing.T) map[string]string {
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log}\n")
	env := baseEnv(root)
	delete(env, "LOG_LEVEL")
	return env
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestStartLogNamesSettings: at the default level the start-up log names
// the configuration's directory, the store, the failure policy and the
// algorithms in use, and a password in REDIS_URL or REDIS_AUTH is never
// written (go-redis's own lines, routed through slog, included).
func TestStartLogNamesSettings(t *testing.T) {
	const password = "pw-NEVER-LOGGED-42"
	env := quietEnv(t)
	env["REDIS_SOCKET_TYPE"] = "tcp"
	env["REDIS_URL"] = "redis://user:" + password + "@" + closedPort(t)
	env["LIMITKIT_ON_FAILURE"] = "fail_closed"
	logs := startLog(t, env, nil)
	for _, want := range []string{
		"msg=\"configuration source\"", "runtime_root=" + env["RUNTIME_ROOT"], "runtime_watch_root=false",
		"msg=\"store setting\"", "REDIS_URL=redis://xxxxx@127.0.0.1:", "on_failure=fail_closed", "redis_client=go-redis",
		"default_algorithm=", "log_level=INFO",
		"msg=\"rate limit configuration loaded\"", "algorithms=[sliding_log]",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the start-up log lacks %q\nlogs:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, password) {
		t.Errorf("the password is in the log:\n%s", logs)
	}
	// Redis is down: go-redis's dial failure is a slog line, not raw.
	if !strings.Contains(logs, "source=go-redis") {
		t.Errorf("no go-redis line in the service's log (its logger is not routed)\nlogs:\n%s", logs)
	}

	// REDIS_AUTH and a secret URL option: said to be set, never shown.
	env["REDIS_URL"] = closedPort(t)
	env["REDIS_AUTH"] = "u:" + password
	logs = startLog(t, env, nil)
	if strings.Contains(logs, password) || !strings.Contains(logs, "redis_auth=set") {
		t.Errorf("REDIS_AUTH: want redis_auth=set and no password\nlogs:\n%s", logs)
	}
	if got := redactOptions("redis+sentinel://h:26379/m?sentinel_password=" + password + "&pool_size=3"); strings.Contains(got, password) || !strings.Contains(got, "pool_size=3") {
		t.Errorf("redactOptions = %q", got)
	}
}

// TestUnknownVariablesWarned: a misspelt LIMITKIT_ variable and a near
// miss of a reference variable are warned about by name; the variables a
// shell or Kubernetes sets, and the known ones, are not (the control).
func TestUnknownVariablesWarned(t *testing.T) {
	env := quietEnv(t)
	environ := []string{
		"LIMITKIT_REDIS_DEADLIN=5ms", "REDIS_URLL=localhost:6379", "LIMITKIT_NOPE=1",
		// Not settings, and not near one: no word.
		"PATH=/bin", "HOME=/root", "HOSTNAME=rls-0", "TERM=xterm", "LANG=C", "USER=nonroot", "PWD=/",
		"KUBERNETES_SERVICE_HOST=10.0.0.1", "KUBERNETES_PORT=tcp://10.0.0.1:443", "REDIS_PORT=tcp://10.0.0.2:6379",
		"REDIS_SERVICE_HOST=10.0.0.2", "REDIS_PORT_6379_TCP_ADDR=10.0.0.2", "GOMAXPROCS=2", "GOMEMLIMIT=1GiB",
		// A near miss of a setting that is not a Kubernetes service link.
		"GRPC_PROT=1",
		// Known: no word.
		"LIMITKIT_REDIS_DEADLINE=5ms", "LIMITKIT_REQUIRE_REDIS=1", "LIMITKIT_SOAK=1", "REDIS_URL=x", "REDIS_PERSECOND_TIMEOUT=1s", "MEMCACHE_TLS=false", "RUNTIME_WATCH_ROOT=false", "USE_STATSD=false", "GRPC_SERVER_TLS_CA_CERT=",
	}
	logs := startLog(t, env, environ)
	var warned []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "variable ignored") {
			warned = append(warned, field(line, "name"))
		}
	}
	want := []string{"LIMITKIT_REDIS_DEADLIN", "REDIS_URLL", "LIMITKIT_NOPE", "GRPC_PROT"}
	if strings.Join(warned, ",") != strings.Join(want, ",") {
		t.Errorf("warned about %v, want %v\nlogs:\n%s", warned, want, logs)
	}
	for _, hint := range []string{"did you mean LIMITKIT_REDIS_DEADLINE?", "did you mean REDIS_URL?"} {
		if !strings.Contains(logs, hint) {
			t.Errorf("no %q in the log\nlogs:\n%s", hint, logs)
		}
	}
	if strings.Contains(logs, "localhost:6379") {
		t.Errorf("a value of an unknown variable is in the log:\n%s", logs)
	}
}

// TestRepositoryTestVariablesListed: every LIMITKIT_ variable the
// repository's tests, benchmarks and CI read is in repositoryTestVariables
// (or is a setting), so exporting one draws no warning. It reads the
// variables from the code: string literals outside this service, and
// .ci/run's names.
func TestRepositoryTestVariablesListed(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	name := regexp.MustCompile(`LIMITKIT_[A-Z0-9_]*[A-Z0-9]`)
	literal := regexp.MustCompile(`"(LIMITKIT_[A-Z0-9_]*[A-Z0-9])"`)
	read := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || rel == filepath.Join("rls", "cmd", "limitkit-rls")):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".go"):
			return collect(path, literal, 1, read)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := collect(filepath.Join(root, ".ci", "run"), name, 0, read); err != nil {
		t.Fatal(err)
	}
	// The control: the walk found the variables it must.
	for _, want := range []string{"LIMITKIT_REQUIRE_REDIS", "LIMITKIT_MODEL_SEED", "LIMITKIT_PACKAGE_BUDGET"} {
		if !read[want] {
			t.Fatalf("the walk did not find %s; is the repository root %s?", want, root)
		}
	}
	known := knownVariables()
	for v := range read {
		if !slices.Contains(known, v) && !slices.Contains(repositoryTestVariables, v) {
			t.Errorf("%s is read by the repository's tests but not in repositoryTestVariables: limitkit-rls would warn about it", v)
		}
	}
}

func collect(path string, re *regexp.Regexp, group int, into map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, m := range re.FindAllSubmatch(b, -1) {
		into[string(m[group])] = true
	}
	return nil
}

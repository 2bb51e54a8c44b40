package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter"
)

// good is a valid file; the broken cases below change one line of it.
const good = `# limits for the tests
backend:
  url: memory://?max_keys=1000
policies:
  login:
    algorithm: sliding_log
    limit: 5
    window: 15m
    on_failure: fail_open
  api:
    algorithm: sliding_counter
    limit: 100
    window: 1m
    prefix: "test:api:"
  payment:
    algorithm: fixed_window
    limit: 3
    window: 1s
    on_failure: local:4
    guard:
      limit: 5
      window: 1h
      on_failure: fail_closed
`

// replaceLine returns good with line n (1-based) replaced by text.
func replaceLine(t *testing.T, n int, text string) string {
	t.Helper()
	lines := strings.Split(good, "\n")
	require.Less(t, n-1, len(lines))
	lines[n-1] = text
	return strings.Join(lines, "\n")
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestLoadGood(t *testing.T) {
	cfg, err := Load(writeFile(t, "limits.yaml", good))
	require.NoError(t, err)
	require.Equal(t, "memory://?max_keys=1000", cfg.Backend.URL)
	require.Equal(t, []Policy{
		{Name: "login", Config: limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 5, Window: 15 * time.Minute,
			Prefix: "limitkit:login:", OnFailure: backend.FailOpen}},
		{Name: "api", Config: limiter.Config{Algorithm: algorithms.SlidingCounter, Limit: 100, Window: time.Minute,
			Prefix: "test:api:"}},
		{Name: "payment", Config: limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Second,
			Prefix: "limitkit:payment:", OnFailure: backend.LocalPolicy(4),
			Guard: &limiter.Guard{Limit: 5, Window: time.Hour, OnFailure: backend.FailClosed}}},
	}, cfg.Policies)
	p, ok := cfg.Policy("api")
	require.True(t, ok)
	require.Equal(t, int64(100), p.Limit)
	_, ok = cfg.Policy("nope")
	require.False(t, ok)
}

// TestBrokenFiles: each broken file's error names the file, the line and
// the field, says what to change, and wraps limiter.ErrInvalidConfig.
func TestBrokenFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    string // the whole message
		line    int
		field   string
	}{
		{"bad window", replaceLine(t, 8, `    window: 1 minute`),
			`limits.yaml:8: policies.login.window: "1 minute" is not a duration; write it like "1m", "90s" or "500ms"`, 8, "policies.login.window"},
		{"window as a number", replaceLine(t, 8, `    window: 60`),
			`limits.yaml:8: policies.login.window: "60" is not a duration; write it like "1m", "90s" or "500ms"`, 8, "policies.login.window"},
		{"window too long", replaceLine(t, 13, `    window: 9000h`),
			`limits.yaml:13: policies.api.window: window 9000h0m0s is longer than the maximum 8784h0m0s`, 13, "policies.api.window"},
		{"unknown field", replaceLine(t, 7, `    limt: 5`),
			`limits.yaml:7: policies.login.limt: unknown field (did you mean "limit"?); the fields here are algorithm, limit, window, prefix, on_failure, mode, guard, exempt, deny, reservation_timeout, http`, 7, "policies.login.limt"},
		{"unknown top-level field", replaceLine(t, 1, `version: 2`),
			`limits.yaml:1: version: unknown field; the fields here are backend, policies, adaptive`, 1, "version"},
		{"unknown guard field", replaceLine(t, 23, `      on_fail: fail_closed`),
			`limits.yaml:23: policies.payment.guard.on_fail: unknown field (did you mean "on_failure"?); the fields here are algorithm, limit, window, on_failure, mode`, 23, "policies.payment.guard.on_fail"},
		{"bad algorithm", replaceLine(t, 6, `    algorithm: leaky_bucket`),
			fmt.Sprintf(`limits.yaml:6: policies.login.algorithm: unknown algorithm "leaky_bucket"; choose one of %q`, algorithms.Names()), 6, "policies.login.algorithm"},
		{"bad URL scheme", replaceLine(t, 3, `  url: http://127.0.0.1:6379`),
			`limits.yaml:3: backend.url: unknown scheme "http"; write memory://, redis://, rediss://, redis+cluster:// or redis+sentinel://`, 3, "backend.url"},
		{"URL option the client rejects", replaceLine(t, 3, `  url: redis://127.0.0.1:6379/0?pool_sise=3`),
			`limits.yaml:3: backend.url: go-redis: redis: unexpected option: pool_sise`, 3, "backend.url"},
		{"bad memory option", replaceLine(t, 3, `  url: memory://?max_keys=0`),
			`limits.yaml:3: backend.url: max_keys "0": write a whole number of at least 1`, 3, "backend.url"},
		{"bad client", replaceLine(t, 2, "backend:\n  client: jedis"),
			`limits.yaml:3: backend.client: unknown client "jedis"; write "go-redis" or "rueidis"`, 3, "backend.client"},
		{"zero limit", replaceLine(t, 7, `    limit: 0`),
			`limits.yaml:7: policies.login.limit: limit is 0; it must be at least 1`, 7, "policies.login.limit"},
		{"limit not a number", replaceLine(t, 7, `    limit: five`),
			`limits.yaml:7: policies.login.limit: "five" is not a whole number`, 7, "policies.login.limit"},
		{"sliding log limit too high", replaceLine(t, 7, `    limit: 20000`),
			// The rest of the message is limiter's, naming the other algorithms.
			`limits.yaml:7: policies.login.limit: limit 20000 is above the sliding_log maximum 10000...`, 7, "policies.login.limit"},
		{"missing limit", replaceLine(t, 7, ``),
			`limits.yaml:5: policies.login.limit: missing; write the number of requests admitted per window`, 5, "policies.login.limit"},
		{"bad failure policy", replaceLine(t, 9, `    on_failure: fail_sometimes`),
			`limits.yaml:9: policies.login.on_failure: failure policy "fail_sometimes": write "local", "local:N" (N instances share the limit, N >= 1), "fail_open" or "fail_closed"`, 9, "policies.login.on_failure"},
		{"bad guard window", replaceLine(t, 22, `      window: 0s`),
			`limits.yaml:22: policies.payment.guard.window: window is 0s; it must be at least 1ms`, 22, "policies.payment.guard.window"},
		{"prefix with a brace", replaceLine(t, 14, `    prefix: "api{"`),
			`limits.yaml:14: policies.api.prefix: prefix "api{" contains '{' or '}'; remove them`, 14, "policies.api.prefix"},
		{"shared prefix", replaceLine(t, 14, `    prefix: "limitkit:login:"`),
			`limits.yaml:14: policies.api.prefix: the keys under "limitkit:login:" are already policies.login's; give each policy its own prefix`, 14, "policies.api.prefix"},
		{"policy not a mapping", replaceLine(t, 5, "  login: 5/minute\n  login2:"),
			`limits.yaml:5: policies.login: "5/minute" is not a mapping of fields`, 5, "policies.login"},
		{"policy given twice", replaceLine(t, 10, "  login:"),
			`limits.yaml:10: policies.login: given twice (also on line 5)`, 10, "policies.login"},
		{"bad policy name", replaceLine(t, 10, "  my api:"),
			`limits.yaml:10: policies.my api: name "my api": use letters, digits and "_-.:/" only`, 10, "policies.my api"},
		{"fallback on memory", replaceLine(t, 3, "  url: memory://\n  fallback: {timeout: 50ms}"),
			`limits.yaml:4: backend.fallback: wraps a Redis store; memory:// needs none`, 4, "backend.fallback"},
		{"bad fallback timeout", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  fallback:\n    timeout: soon"),
			`limits.yaml:5: backend.fallback.timeout: "soon" is not a duration; write it like "1m", "90s" or "500ms"`, 5, "backend.fallback.timeout"},
		{"replica ack on a cluster", replaceLine(t, 3, "  url: redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001\n  replica_ack: {replicas: 1, timeout: 50ms}"),
			`limits.yaml:4: backend.replica_ack: not available on Redis Cluster; use a single-master URL (redis:// or redis+sentinel://)`, 4, "backend.replica_ack"},
		{"server time on memory", replaceLine(t, 3, "  url: memory://\n  server_time: true"),
			`limits.yaml:4: backend.server_time: needs a Redis backend; memory:// always uses the limiter's clock`, 4, "backend.server_time"},
		{"batch on memory", replaceLine(t, 3, "  url: memory://\n  batch: 8"),
			`limits.yaml:4: backend.batch: needs a Redis backend; memory:// sends nothing`, 4, "backend.batch"},
		{"negative batch", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  batch: -2"),
			`limits.yaml:4: backend.batch: is -2; it must be at least 1 (1 sends each Take alone)`, 4, "backend.batch"},
		{"server time not a bool", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  server_time: yes please"),
			`limits.yaml:4: backend.server_time: "yes please" is not true or false`, 4, "backend.server_time"},
		{"bad on_short", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  replica_ack:\n    replicas: 1\n    timeout: 50ms\n    on_short: shrug"),
			`limits.yaml:7: backend.replica_ack.on_short: "shrug": write "deny" or "admit"`, 7, "backend.replica_ack.on_short"},
		{"replica ack without replicas", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  replica_ack: {timeout: 50ms}"),
			`limits.yaml:4: backend.replica_ack.replicas: is 0; it must be at least 1`, 4, "backend.replica_ack.replicas"},
		{"negative failure threshold", replaceLine(t, 3, "  url: redis://127.0.0.1:6379\n  fallback:\n    failure_threshold: -1"),
			`limits.yaml:5: backend.fallback.failure_threshold: is -1; it must be at least 1 (or absent for the default)`, 5, "backend.fallback.failure_threshold"},
		{"missing url", replaceLine(t, 3, "  client: go-redis"),
			`limits.yaml:3: backend.url: missing; write memory:// or redis://host:port/db`, 3, "backend.url"},
		{"sentinel without a master", replaceLine(t, 3, "  url: redis+sentinel://127.0.0.1:26379"),
			`limits.yaml:3: backend.url: a sentinel URL names the master: add ?master_name=NAME`, 3, "backend.url"},
		{"YAML syntax", replaceLine(t, 8, `    window: [1m`),
			`limits.yaml:8: not valid YAML: did not find expected ',' or ']' in the block that starts here; check the indentation and brackets below`, 8, ""},
		{"no policies", "backend:\n  url: memory://\n",
			`limits.yaml: policies: missing; declare at least one policy`, 0, "policies"},
		{"empty file", "# nothing\n",
			`limits.yaml: the file is empty`, 0, ""},
		{"two documents", good + "---\nbackend: {}\n",
			`limits.yaml:25: a second YAML document (after ---); write one document`, 25, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, "limits.yaml", tc.content))
			require.Error(t, err)
			require.ErrorIs(t, err, limiter.ErrInvalidConfig)
			msg := err.Error()
			// The file is in a temporary directory; compare from its name on.
			msg = msg[strings.Index(msg, "limits.yaml"):]
			if want, ok := strings.CutSuffix(tc.want, "..."); ok {
				require.True(t, strings.HasPrefix(msg, want), msg)
			} else {
				require.Equal(t, tc.want, msg)
			}
			var e *Error
			require.True(t, errors.As(err, &e))
			require.Equal(t, tc.line, e.Line)
			require.Equal(t, tc.field, e.Field)
		})
	}
}

func TestBrokenJSON(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"bad window", "{\n  \"backend\": {\"url\": \"memory://\"},\n  \"policies\": {\n    \"login\": {\"limit\": 5,\n      \"window\": 60}\n  }\n}",
			`limits.json:5: policies.login.window: "60" is not a duration; write it like "1m", "90s" or "500ms"`},
		{"unknown field", "{\n  \"backend\": {\"url\": \"memory://\"},\n  \"policies\": {\n    \"login\": {\"limit\": 5, \"window\": \"1m\",\n      \"algo\": \"sliding_log\"}\n  }\n}",
			`limits.json:5: policies.login.algo: unknown field (did you mean "algorithm"?); the fields here are algorithm, limit, window, prefix, on_failure, mode, guard, exempt, deny, reservation_timeout, http`},
		{"trailing comma", "{\n  \"backend\": {\"url\": \"memory://\"},\n  \"policies\": {\"login\": {\"limit\": 5, \"window\": \"1m\",}}\n}",
			`limits.json:3: not valid JSON: invalid character '}' looking for beginning of object key string`},
		{"truncated", "{\n  \"backend\": {\"url\": \"memory://\"},\n  \"policies\": {",
			`limits.json:3: not valid JSON: the file ends too soon`},
		{"limit as a string", "{\"backend\": {\"url\": \"memory://\"},\n\"policies\": {\"login\": {\"limit\": \"5\", \"window\": \"1m\"}}}",
			`limits.json:2: policies.login.limit: "5" is not a whole number`},
		{"fractional limit", "{\"backend\": {\"url\": \"memory://\"},\n\"policies\": {\"login\": {\"limit\": 5.5, \"window\": \"1m\"}}}",
			`limits.json:2: policies.login.limit: "5.5" is not a whole number`},
		{"trailing data", "{\"backend\": {\"url\": \"memory://\"}, \"policies\": {\"a\": {\"limit\": 1, \"window\": \"1s\"}}}\n{}",
			`limits.json:2: not valid JSON: more data after the top-level value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, "limits.json", tc.content))
			require.ErrorIs(t, err, limiter.ErrInvalidConfig)
			msg := err.Error()
			require.Equal(t, tc.want, msg[strings.Index(msg, "limits.json"):])
		})
	}
}

// TestJSONMatchesYAML: the same file in both formats gives the same Config.
func TestJSONMatchesYAML(t *testing.T) {
	fromYAML, err := Parse([]byte(good), YAML)
	require.NoError(t, err)
	fromJSON, err := Parse([]byte(`{
	"backend": {"url": "memory://?max_keys=1000"},
	"policies": {
		"login": {"algorithm": "sliding_log", "limit": 5, "window": "15m", "on_failure": "fail_open"},
		"api": {"algorithm": "sliding_counter", "limit": 100, "window": "1m", "prefix": "test:api:"},
		"payment": {"algorithm": "fixed_window", "limit": 3, "window": "1s", "on_failure": "local:4",
			"guard": {"limit": 5, "window": "1h", "on_failure": "fail_closed"}}
	}
}`), JSON)
	require.NoError(t, err)
	require.Equal(t, fromYAML.Backend, fromJSON.Backend)
	require.Equal(t, fromYAML.Policies, fromJSON.Policies)
}

// TestPolicyIsLimiterJSON: a policy is written with limiter.Config's JSON
// field names: every field limiter.Config marshals is one this package
// reads, and reads back to the same Config. A field added to
// limiter.Config's JSON fails here until this package learns it.
func TestPolicyIsLimiterJSON(t *testing.T) {
	want := limiter.Config{Algorithm: algorithms.SlidingCounter, Limit: 7, Window: 90 * time.Second, Prefix: "p:",
		OnFailure: backend.LocalPolicy(3),
		Guard:     &limiter.Guard{Algorithm: algorithms.SlidingLog, Limit: 9, Window: time.Hour, OnFailure: backend.FailClosed}}
	policy, err := json.Marshal(want)
	require.NoError(t, err)
	cfg, err := Parse([]byte(`{"backend": {"url": "memory://"}, "policies": {"p": `+string(policy)+`}}`), JSON)
	require.NoError(t, err, string(policy))
	require.Equal(t, want, cfg.Policies[0].Config)
}

// TestHostileYAML: aliases that expand exponentially are refused, not
// expanded.
func TestHostileYAML(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := Parse([]byte(b.String()), YAML)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
}

func TestUnknownFormat(t *testing.T) {
	_, err := Parse([]byte(good), "toml")
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, `unknown format "toml"`)
}

// TestURLErrorsHidePasswords: a URL's password never appears in an error.
func TestURLErrorsHidePasswords(t *testing.T) {
	for _, u := range []string{
		"redis://user:s3cret@127.0.0.1:6379/0?bogus=1",
		"redis://user:s3cret@127.0.0.1:6379/x",
		"ftp://user:s3cret@127.0.0.1/",
		"redis://user:s3cret@[::1",
	} {
		_, err := Parse([]byte("backend: {url: '"+u+"'}\npolicies: {a: {limit: 1, window: 1s}}\n"), YAML)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "s3cret")
	}
}

// TestValidateInGo: a Config written in Go is validated the same way, its
// errors naming the field.
func TestValidateInGo(t *testing.T) {
	cfg := &Config{Backend: Backend{URL: "memory://"}, Policies: []Policy{{Name: "a", Config: limiter.Config{Limit: 1, Window: time.Second}}}}
	require.NoError(t, cfg.Validate())
	cfg.Policies[0].Config.Window = 0
	err := cfg.Validate()
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.EqualError(t, err, `policies.a.window: missing; write the period of the limit, such as "1m"`)
	_, err = cfg.Build(context.Background())
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
}

// TestOneDecodingPath: a policy in a file and a limiter.Config in JSON are
// read by the same code: the same input gives the same Config, or the same
// error naming the same field. A check added to one path only fails here.
func TestOneDecodingPath(t *testing.T) {
	for _, policy := range []string{
		`{"limit": 5, "window": "1m", "algorithm": "gcra", "prefix": "p:", "on_failure": "local:2"}`,
		`{"limit": 5, "window": "1m", "guard": {"limit": 50, "window": "1h", "on_failure": "fail_closed"}}`,
		`{"limit": 5, "window": 60}`,
		`{"limit": 5, "window": "1 minute"}`,
		`{"limit": "5", "window": "1m"}`,
		`{"limit": 5.5, "window": "1m"}`,
		`{"limit": 5, "window": "1m", "lmt": 1}`,
		`{"limit": 5, "window": "1m", "limit": 6}`,
		`{"limit": 5, "window": "1m", "prefix": 7}`,
		`{"limit": 5, "window": "1m", "prefix": null}`,
		`{"limit": 5, "window": "1m", "on_failure": "sometimes"}`,
		`{"limit": 5, "window": "1m", "guard": {"limit": 5, "windw": "1h"}}`,
		`{"limit": 5, "window": "1m", "guard": 3}`,
		`[5]`,
	} {
		var fromJSON limiter.Config
		jsonErr := json.Unmarshal([]byte(policy), &fromJSON)
		// Parse validates too; compare with a file whose only problem is
		// the one the decoder finds.
		cfg, fileErr := Parse([]byte(`{"backend": {"url": "memory://"}, "policies": {"p": `+policy+`}}`), JSON)
		if jsonErr == nil {
			require.NoError(t, fileErr, policy)
			fromJSON.Prefix = policyPrefix("p", fromJSON)
			require.Equal(t, fromJSON, cfg.Policies[0].Config, policy)
			continue
		}
		var e *Error
		require.ErrorAs(t, fileErr, &e, policy)
		require.ErrorIs(t, jsonErr, limiter.ErrInvalidConfig, policy)
		// limiter: "limiter: window: msg"; the file: field
		// "policies.p.window", message msg.
		field, _ := strings.CutPrefix(e.Field, "policies.p")
		field = strings.TrimPrefix(field, ".")
		// A file's policy also has its http block, which JSON's Config has not.
		want := strings.Replace(e.Err.Error(), ", reservation_timeout, http", ", reservation_timeout", 1)
		if field != "" {
			want = field + ": " + want
		}
		require.Equal(t, "limiter: "+want, jsonErr.Error(), policy)
	}
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// runFails runs the service with env and returns its error and logs; it
// fails the test when the service starts instead.
func runFails(t *testing.T, env map[string]string) (logs string, err error) {
	t.Helper()
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	started := make(chan struct{}, 1)
	err = run(ctx, lookupOf(env), out, func(addrs) { started <- struct{}{}; cancel() })
	select {
	case <-started:
		t.Fatalf("the service started; want a refusal\nlogs:\n%s", out)
	default:
	}
	return out.String(), err
}

// TestBadRedisSettingsFailStart: a wrong REDIS_AUTH, a missing one, and
// REDIS_TLS=true against a plain server fail the start with the cause
// (they used to start SERVING, each instance limiting alone); a password
// in a redis:// REDIS_URL is used and never logged, and Redis down at
// start still starts (limiting locally) with a warning.
func TestBadRedisSettingsFailStart(t *testing.T) {
	const password = "s3cret-PASSWORD-7"
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	if err := admin.ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close()
	root, config := runtimeDir(t)
	writeFile(t, filepath.Join(config, "rl.yaml"), perMinute)
	env := func(kv ...string) map[string]string {
		e := baseEnv(root)
		e["REDIS_SOCKET_TYPE"], e["REDIS_URL"] = "tcp", srv.Addr()
		for i := 0; i+1 < len(kv); i += 2 {
			e[kv[i]] = kv[i+1]
		}
		return e
	}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"wrong password", env("REDIS_AUTH", "wrong"), "WRONGPASS"},
		{"no password", env(), "NOAUTH"},
		{"TLS against a plain server", env("REDIS_AUTH", password, "REDIS_TLS", "true", "REDIS_TIMEOUT", "1s"), "set REDIS_TLS=false"},
		{"rediss:// against a plain server", env("REDIS_URL", "rediss://:"+password+"@"+srv.Addr(), "REDIS_TIMEOUT", "1s"), "set REDIS_TLS=false"},
		{"wrong password in the URL", env("REDIS_URL", "redis://:wrong-"+password+"@"+srv.Addr()), "WRONGPASS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs, err := runFails(t, c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run: %v; want the cause %q", err, c.want)
			}
			if strings.Contains(err.Error()+logs, password) {
				t.Fatalf("the password is in the error or the logs:\n%v\n%s", err, logs)
			}
		})
	}

	t.Run("password in the URL", func(t *testing.T) {
		in := start(t, env("REDIS_URL", "redis://:"+password+"@"+srv.Addr()))
		if resp, err := in.ask("rl", []string{"foo"}); err != nil || resp.GetOverallCode().String() != "OK" {
			t.Fatalf("a call: %v %v", resp, err)
		}
		if v := in.metric(t, `limitkit_degraded_decisions_total{`); v != "" {
			t.Fatalf("decided degraded: the password was not used")
		}
		_ = in.stop()
		logs := in.logs.String()
		if !strings.Contains(logs, "store opened") || strings.Contains(logs, password) {
			t.Fatalf("want the store opened with no password in any line:\n%s", logs)
		}
	})

	t.Run("Redis down at start", func(t *testing.T) {
		down := redistest.Start(t)
		addr := down.Addr()
		down.Kill()
		e := env("REDIS_URL", addr, "REDIS_TIMEOUT", "200ms")
		in := start(t, e)
		if resp, err := in.ask("rl", []string{"foo"}); err != nil || resp.GetOverallCode().String() != "OK" {
			t.Fatalf("a call with Redis down: %v %v", resp, err)
		}
		if !strings.Contains(in.logs.String(), "Redis does not answer at start") {
			t.Fatalf("no warning:\n%s", in.logs)
		}
	})
}

package settings

import (
	"strings"
	"testing"
	"time"
)

func env(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestDefaults are the reference's.
func TestDefaults(t *testing.T) {
	s, err := Load(env())
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 8080 || s.GrpcPort != 8081 || s.DebugPort != 6070 || s.Host != "0.0.0.0" ||
		s.RuntimeRoot != "/srv/runtime_data/current" || s.RuntimeAppDirectory != "config" || !s.RuntimeWatchRoot ||
		s.PrometheusAddr != ":9090" || s.PrometheusPath != "/metrics" || s.RedisURL != "/var/run/nutcracker/ratelimit.sock" ||
		s.RedisSocketType != "unix" || s.RedisType != "SINGLE" || s.RedisPoolSize != 10 || s.NearLimitRatio != 0.8 ||
		s.HeaderLimit != "RateLimit-Limit" || s.HeaderRemaining != "RateLimit-Remaining" || s.HeaderReset != "RateLimit-Reset" ||
		s.GrpcMaxConnectionAge != 24*time.Hour || s.OnFailure != "local" {
		t.Fatalf("defaults differ from the reference's: %+v", s)
	}
	if !s.Memory() {
		t.Fatal("no REDIS_URL and no BACKEND_TYPE: want the memory store")
	}
	if len(s.Ignored) != 0 {
		t.Fatalf("ignored %v with nothing set", s.Ignored)
	}
}

func TestBackendChoice(t *testing.T) {
	for _, c := range []struct {
		env    Lookup
		memory bool
	}{
		{env("BACKEND_TYPE", "redis"), false},
		{env("REDIS_URL", "localhost:6379"), false},
		{env("BACKEND_TYPE", "memory", "REDIS_URL", "x:1"), true},
		{env("LIMITKIT_BACKEND_URL", "redis://x:1"), false},
	} {
		s, err := Load(c.env)
		if err != nil {
			t.Fatal(err)
		}
		if s.Memory() != c.memory {
			t.Errorf("%+v: memory %v, want %v", s, s.Memory(), c.memory)
		}
	}
}

// TestIgnoredAreNotFatal: the reference's variables that mean nothing here
// are listed, never refused; those at a neutral value are not even listed.
func TestIgnoredAreNotFatal(t *testing.T) {
	s, err := Load(env("USE_STATSD", "true", "EXPIRATION_JITTER_MAX_SECONDS", "300", "REDIS_PIPELINE_WINDOW", "150us",
		"CONFIG_TYPE", "FILE", "USE_DOG_STATSD", "false"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ig := range s.Ignored {
		got = append(got, ig.Name)
	}
	if strings.Join(got, ",") != "USE_STATSD,EXPIRATION_JITTER_MAX_SECONDS,REDIS_PIPELINE_WINDOW" {
		t.Fatalf("ignored %v", got)
	}
}

// TestBadValues name the variable and what to write, all at once.
func TestBadValues(t *testing.T) {
	_, err := Load(env("PORT", "http", "REDIS_TYPE", "ring", "LOG_LEVEL", "loud", "RUNTIME_WATCH_ROOT", "maybe",
		"BACKEND_TYPE", "memcache", "REDIS_AUTH", "s3cret-value"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`PORT="http"`, `REDIS_TYPE="RING"`, `LOG_LEVEL="loud"`, `RUNTIME_WATCH_ROOT="maybe"`, "no memcache store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatal("the error repeats REDIS_AUTH")
	}
}

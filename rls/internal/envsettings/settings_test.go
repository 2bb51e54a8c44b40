package envsettings

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

// TestXDSEnvoyGateway reads the environment Envoy Gateway gives the
// reference (internal/infrastructure/kubernetes/ratelimit/resource.go),
// its spelling of the client CA included.
func TestXDSEnvoyGateway(t *testing.T) {
	s, err := Load(env(
		"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/certs/tls.crt", "GRPC_SERVER_TLS_KEY", "/certs/tls.key",
		"GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG", "true", "USE_STATSD", "false",
	))
	if err != nil {
		t.Fatal(err)
	}
	x := s.XDS
	if s.ConfigType != ConfigXDS || x.ServerURL != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" || !x.UseTLS ||
		x.ClientTLSCert != "/certs/tls.crt" || x.ClientTLSKey != "/certs/tls.key" || x.ServerTLSCA != "/certs/ca.crt" {
		t.Fatalf("xDS settings: %+v", x)
	}
	if s.GrpcClientTLSCACert != "/certs/ca.crt" {
		t.Fatalf("GRPC_SERVER_TLS_CA_CERT not read as the client CA: %q", s.GrpcClientTLSCACert)
	}
	for _, ig := range s.Ignored {
		if strings.Contains(ig.Name, "XDS") || ig.Name == "CONFIG_TYPE" {
			t.Fatalf("%s listed as ignored", ig.Name)
		}
	}
	// The reference's spelling wins when both are set.
	s, err = Load(env("GRPC_CLIENT_TLS_CACERT", "/a", "GRPC_SERVER_TLS_CA_CERT", "/b"))
	if err != nil || s.GrpcClientTLSCACert != "/a" {
		t.Fatalf("both CA spellings: %v %q", err, s.GrpcClientTLSCACert)
	}
}

// TestXDSDefaults are the reference's.
func TestXDSDefaults(t *testing.T) {
	s, err := Load(env())
	if err != nil {
		t.Fatal(err)
	}
	x := s.XDS
	if s.ConfigType != ConfigFile || x.NodeID != "default" || x.ServerURL != "localhost:18000" || x.ConnectRetryInterval != 3*time.Second ||
		x.BackoffInitial != 10*time.Second || x.BackoffMax != 60*time.Second || x.BackoffRandomFactor != 0.5 || !x.BackoffJitter ||
		x.UseTLS || x.MaxMsgSizeInBytes != 0 || len(x.Headers) != 0 || len(x.NodeMetadata) != 0 || s.TLSReloadInterval != 10*time.Second {
		t.Fatalf("defaults: %s %+v", s.ConfigType, x)
	}
}

func TestXDSPairsAndValues(t *testing.T) {
	s, err := Load(env("CONFIG_TYPE", "grpc_xds_sotw",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:a, authorization:Bearer t:k",
		"CONFIG_GRPC_XDS_NODE_METADATA", "zone=eu-1,cluster=c=2",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "500ms", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1s",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.2", "XDS_CLIENT_BACKOFF_JITTER", "false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"))
	if err != nil {
		t.Fatal(err)
	}
	x := s.XDS
	if s.ConfigType != ConfigXDS || x.Headers["x-tenant"] != "a" || x.Headers["authorization"] != "Bearer t:k" ||
		x.NodeMetadata["zone"] != "eu-1" || x.NodeMetadata["cluster"] != "c=2" || x.ConnectRetryInterval != 500*time.Millisecond ||
		x.BackoffInitial != time.Second || x.BackoffMax != 5*time.Second || x.BackoffRandomFactor != 0.2 || x.BackoffJitter ||
		x.MaxMsgSizeInBytes != 8<<20 || x.ServerTLSSAN != "envoy-gateway" {
		t.Fatalf("%+v", x)
	}
	for _, c := range []struct{ k, v, want string }{
		{"CONFIG_TYPE", "CONSUL", "CONFIG_TYPE"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "secret-token", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL"},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "0s", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
		{"LIMITKIT_TLS_RELOAD_INTERVAL", "-1s", "LIMITKIT_TLS_RELOAD_INTERVAL"},
	} {
		_, err := Load(env("CONFIG_TYPE", "GRPC_XDS_SOTW", c.k, c.v))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v, want an error naming %s", c.k, c.v, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token") {
			t.Errorf("the headers' value is echoed: %v", err)
		}
	}
}

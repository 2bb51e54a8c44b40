// Package envsettings reads limitkit-rls's configuration from the environment:
// the variables of the reference server (envoyproxy/ratelimit), with its
// names and defaults, and a few of limitkit's own (LIMITKIT_*).
//
// A variable the reference reads but that means nothing here (statsd,
// memcache, tracing, key expiry jitter, ...) is accepted and listed in
// Settings.Ignored, so that the binary can log it and go on. A value that
// cannot be read (PORT=abc) is an error naming the variable.
package envsettings

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// defaultRedisDeadline is LIMITKIT_REDIS_DEADLINE's default: half of
// Envoy's default rate-limit timeout (20 ms), leaving the other half to the
// gRPC hop and the policy's answer; a healthy Redis on loopback or a LAN
// answers a script in well under a millisecond.
const defaultRedisDeadline = 10 * time.Millisecond

// Lookup reads one environment variable, as os.LookupEnv does.
type Lookup func(name string) (string, bool)

// Settings is the configuration of the binary. Every field says its
// variable and default.
type Settings struct {
	// HTTP listener for /healthcheck and POST /json: HOST (0.0.0.0), PORT (8080).
	Host string
	Port int
	// Debug listener (pprof, /metrics, /rlconfig): DEBUG_HOST (0.0.0.0), DEBUG_PORT (6070).
	DebugHost string
	DebugPort int
	// gRPC listener: GRPC_HOST (0.0.0.0), GRPC_PORT (8081), or the unix
	// socket GRPC_UDS when set.
	GrpcHost string
	GrpcPort int
	GrpcUDS  string
	// GRPC_MAX_CONNECTION_AGE (24h) and GRPC_MAX_CONNECTION_AGE_GRACE (1h).
	GrpcMaxConnectionAge      time.Duration
	GrpcMaxConnectionAgeGrace time.Duration
	// gRPC server TLS: GRPC_SERVER_USE_TLS (false), GRPC_SERVER_TLS_CERT,
	// GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT (client certificates
	// required when set; Envoy Gateway's GRPC_SERVER_TLS_CA_CERT when
	// that is unset), GRPC_CLIENT_TLS_SAN. The files are read again when
	// they change (LIMITKIT_TLS_RELOAD_INTERVAL).
	GrpcServerUseTLS    bool
	GrpcServerTLSCert   string
	GrpcServerTLSKey    string
	GrpcClientTLSCACert string
	GrpcClientTLSSAN    string
	// LIMITKIT_TLS_RELOAD_INTERVAL (10s): how often, at most, the TLS
	// files (gRPC listener and xDS client) are checked for a change.
	TLSReloadInterval time.Duration

	// CONFIG_TYPE (FILE): FILE reads the runtime directory, GRPC_XDS_SOTW
	// takes the limits from the xDS server described by XDS.
	ConfigType string
	// XDS is the xDS source's settings (CONFIG_GRPC_XDS_*, XDS_CLIENT_*).
	XDS XDS

	// LOG_LEVEL (INFO, so that the start-up lines show; the reference:
	// WARN; debug, info, warn, error, any case) and LOG_FORMAT
	// (text; or json).
	LogLevel  string
	LogFormat string

	// The runtime directory, read as the reference reads it (see package
	// runtimedir): RUNTIME_ROOT (/srv/runtime_data/current),
	// RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY (config),
	// RUNTIME_IGNOREDOTFILES (false), RUNTIME_WATCH_ROOT (true).
	RuntimeRoot           string
	RuntimeSubdirectory   string
	RuntimeAppDirectory   string
	RuntimeIgnoreDotFiles bool
	RuntimeWatchRoot      bool
	// RuntimePollInterval is how often the runtime directory is checked:
	// LIMITKIT_RUNTIME_POLL_INTERVAL (1s).
	RuntimePollInterval time.Duration
	// FORCE_START_WITHOUT_INITIAL_CONFIG (false): start, NOT_SERVING, when
	// the runtime directory holds no loadable config.
	ForceStartWithoutInitialConfig bool
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED (false): health is
	// NOT_SERVING while the configuration in force has no domain.
	HealthyWithAtLeastOneConfigLoaded bool

	// Prometheus at the reference's place: USE_PROMETHEUS (false),
	// PROMETHEUS_ADDR (:9090), PROMETHEUS_PATH (/metrics). The debug
	// listener serves /metrics whatever these say.
	UsePrometheus  bool
	PrometheusAddr string
	PrometheusPath string
	// NEAR_LIMIT_RATIO (0.8): a hit within this share of the limit counts
	// as near_limit.
	NearLimitRatio float64

	// BACKEND_TYPE: redis, or memory (limitkit's). Unset with no REDIS_URL
	// means memory; unset with REDIS_URL means redis.
	BackendType string
	// BackendTypeSet reports whether BACKEND_TYPE was given.
	BackendTypeSet bool
	// REDIS_SOCKET_TYPE (unix), REDIS_TYPE (SINGLE, SENTINEL, CLUSTER),
	// REDIS_URL (/var/run/nutcracker/ratelimit.sock; host:port, a comma
	// list for CLUSTER, "master,sentinel1,..." for SENTINEL), REDIS_AUTH
	// ("password" or "user:password"), REDIS_SENTINEL_AUTH, REDIS_TLS,
	// REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY, REDIS_TLS_CACERT,
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, REDIS_POOL_SIZE (10),
	// REDIS_TIMEOUT (10s: dial, read and write timeouts of the client).
	RedisSocketType      string
	RedisType            string
	RedisURL             string
	RedisURLSet          bool
	RedisAuth            string
	RedisSentinelAuth    string
	RedisTLS             bool
	RedisTLSClientCert   string
	RedisTLSClientKey    string
	RedisTLSCACert       string
	RedisTLSSkipHostname bool
	RedisPoolSize        int
	RedisTimeout         time.Duration
	// LOCAL_CACHE_SIZE_IN_BYTES (0): above 0 turns on the deny cache
	// (backend/denycache), bounded to about this many bytes.
	LocalCacheSizeInBytes int
	// CACHE_KEY_PREFIX (""): prepended to every Redis key.
	CacheKeyPrefix string

	// SHADOW_MODE (false): every limit in shadow mode.
	ShadowMode bool
	// LIMIT_RESPONSE_HEADERS_ENABLED (false) and the header names
	// LIMIT_LIMIT_HEADER (RateLimit-Limit), LIMIT_REMAINING_HEADER
	// (RateLimit-Remaining), LIMIT_RESET_HEADER (RateLimit-Reset).
	ResponseHeadersEnabled bool
	HeaderLimit            string
	HeaderRemaining        string
	HeaderReset            string
	// MERGE_DOMAIN_CONFIG (false): files naming one domain are merged
	// instead of refused.
	MergeDomainConfig bool
	// QUOTA_MODE (false): every limit in quota mode; a request is refused
	// only when every limit it touches refuses it.
	QuotaMode bool

	// LIMITKIT_CHARGED_DOMAINS (none): comma-separated domains whose
	// limits are charged after the response ("*": every domain), the
	// token budgets of Envoy Gateway and AI Gateway (rls.WithChargedDomains).
	ChargedDomains []string
	// LIMITKIT_JSON_ENABLED (true): serve POST /json on PORT. It answers
	// anyone who reaches the port, unauthenticated, with the same power
	// as gRPC (negative hits give units back): false turns it off.
	JSONEnabled bool

	// LIMITKIT_BACKEND_URL: a limitkit store URL (memory://, redis://,
	// rediss://, redis+cluster://, redis+sentinel://, TLS options); it
	// wins over BACKEND_TYPE and the REDIS_* variables.
	BackendURL string
	// LIMITKIT_REDIS_CLIENT (go-redis): go-redis or rueidis.
	RedisClient string
	// LIMITKIT_ON_FAILURE (local): the failure policy of limits that name
	// none: fail_open, fail_closed, local or local:N.
	OnFailure string
	// LIMITKIT_REFERENCE_ERRORS (false): answer a store failure with a
	// gRPC error, as the reference does, instead of the limit's policy.
	ReferenceErrors bool
	// LIMITKIT_REDIS_DEADLINE (10ms): how long one Redis call may take
	// before the limit's failure policy answers. Below Envoy's default
	// rate-limit timeout (20 ms), so that a stalled Redis is answered by
	// the policy (and counted by the breaker) before Envoy gives up.
	RedisDeadline time.Duration
	// LIMITKIT_DRAIN_TIMEOUT (10s): how long SIGTERM waits for in-flight
	// calls before closing what is left.
	DrainTimeout time.Duration
	// LIMITKIT_MEMORY_MAX_KEYS (1000000, memorystore.DefaultMaxKeys): the
	// keys an in-memory store holds (the memory store, and the fallback's
	// local store behind Redis); past it keys are evicted, each getting its
	// full allowance back.
	MemoryMaxKeys int

	// Ignored lists the variables that are set but mean nothing here,
	// each with why, for the log.
	Ignored []Ignored
}

// Ignored is a variable accepted without effect.
type Ignored struct {
	Name   string
	Reason string
}

// ignoredVars are the reference's variables limitkit-rls accepts and does
// not act on, with the reason logged.
var ignoredVars = []Ignored{
	{"USE_STATSD", "statsd is not supported; metrics are Prometheus (USE_PROMETHEUS, DEBUG_PORT /metrics)"},
	{"STATSD_HOST", "statsd is not supported"},
	{"STATSD_PORT", "statsd is not supported"},
	{"USE_DOG_STATSD", "dogstatsd is not supported"},
	{"USE_DOG_STATSD_MOGRIFIERS", "dogstatsd is not supported"},
	{"EXTRA_TAGS", "statsd tags are not supported"},
	{"STATS_FLUSH_INTERVAL", "Prometheus metrics are read when scraped"},
	{"DISABLE_STATS", "metrics cost nothing until scraped"},
	{"PROMETHEUS_MAPPER_YAML", "the metric names are fixed (the reference's defaults)"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "latency is limitkit_decision_duration_seconds"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "keys expire exactly with their window"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "a refused request never consumes here"},
	{"REDIS_PIPELINE_WINDOW", "limitkit batches concurrent calls itself"},
	{"REDIS_PIPELINE_LIMIT", "limitkit batches concurrent calls itself"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "limitkit batches per cluster node itself"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "the client's pool waits, bounded by the fallback deadline"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "Redis down is answered by each limit's failure policy, not by health"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "the service starts without waiting for Redis"},
	{"REDIS_STARTUP_MAX_INTERVAL", "the service starts without waiting for Redis"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "the service starts without waiting for Redis"},
	{"REDIS_PERSECOND", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_URL", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_TYPE", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_AUTH", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_POOL_SIZE", "every limit uses the REDIS_URL store"},
	{"REDIS_PERSECOND_TLS", "every limit uses the REDIS_URL store"},
	{"MEMCACHE_HOST_PORT", "memcache is not supported"},
	{"MEMCACHE_SRV", "memcache is not supported"},
	{"RESPONSE_DYNAMIC_METADATA", "dynamic metadata is not sent"},
	{"TRACING_ENABLED", "tracing is not supported"},
}

// Load reads the settings through lookup (os.LookupEnv when nil).
func Load(lookup Lookup) (*Settings, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	r := reader{lookup: lookup}
	s := &Settings{
		Host:                              r.str("HOST", "0.0.0.0"),
		Port:                              r.port("PORT", 8080),
		DebugHost:                         r.str("DEBUG_HOST", "0.0.0.0"),
		DebugPort:                         r.port("DEBUG_PORT", 6070),
		GrpcHost:                          r.str("GRPC_HOST", "0.0.0.0"),
		GrpcPort:                          r.port("GRPC_PORT", 8081),
		GrpcUDS:                           r.str("GRPC_UDS", ""),
		GrpcMaxConnectionAge:              r.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GrpcMaxConnectionAgeGrace:         r.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		GrpcServerUseTLS:                  r.boolean("GRPC_SERVER_USE_TLS", false),
		GrpcServerTLSCert:                 r.str("GRPC_SERVER_TLS_CERT", ""),
		GrpcServerTLSKey:                  r.str("GRPC_SERVER_TLS_KEY", ""),
		GrpcClientTLSCACert:               r.str("GRPC_CLIENT_TLS_CACERT", ""),
		GrpcClientTLSSAN:                  r.str("GRPC_CLIENT_TLS_SAN", ""),
		TLSReloadInterval:                 r.duration("LIMITKIT_TLS_RELOAD_INTERVAL", 10*time.Second),
		LogLevel:                          r.str("LOG_LEVEL", "INFO"),
		LogFormat:                         r.str("LOG_FORMAT", "text"),
		RuntimeRoot:                       r.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdirectory:               r.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDirectory:               r.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDotFiles:             r.boolean("RUNTIME_IGNOREDOTFILES", false),
		RuntimeWatchRoot:                  r.boolean("RUNTIME_WATCH_ROOT", true),
		RuntimePollInterval:               r.duration("LIMITKIT_RUNTIME_POLL_INTERVAL", time.Second),
		ForceStartWithoutInitialConfig:    r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		HealthyWithAtLeastOneConfigLoaded: r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		UsePrometheus:                     r.boolean("USE_PROMETHEUS", false),
		PrometheusAddr:                    r.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath:                    r.str("PROMETHEUS_PATH", "/metrics"),
		NearLimitRatio:                    r.float("NEAR_LIMIT_RATIO", 0.8),
		BackendType:                       strings.ToLower(r.str("BACKEND_TYPE", "")),
		RedisSocketType:                   strings.ToLower(r.str("REDIS_SOCKET_TYPE", "unix")),
		RedisType:                         strings.ToUpper(r.str("REDIS_TYPE", "SINGLE")),
		RedisURL:                          r.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
		RedisAuth:                         r.str("REDIS_AUTH", ""),
		RedisSentinelAuth:                 r.str("REDIS_SENTINEL_AUTH", ""),
		RedisTLS:                          r.boolean("REDIS_TLS", false),
		RedisTLSClientCert:                r.str("REDIS_TLS_CLIENT_CERT", ""),
		RedisTLSClientKey:                 r.str("REDIS_TLS_CLIENT_KEY", ""),
		RedisTLSCACert:                    r.str("REDIS_TLS_CACERT", ""),
		RedisTLSSkipHostname:              r.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
		RedisPoolSize:                     r.integer("REDIS_POOL_SIZE", 10),
		RedisTimeout:                      r.duration("REDIS_TIMEOUT", 10*time.Second),
		LocalCacheSizeInBytes:             r.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0),
		CacheKeyPrefix:                    r.str("CACHE_KEY_PREFIX", ""),
		ShadowMode:                        r.boolean("SHADOW_MODE", false),
		ResponseHeadersEnabled:            r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		HeaderLimit:                       r.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		HeaderRemaining:                   r.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		HeaderReset:                       r.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		MergeDomainConfig:                 r.boolean("MERGE_DOMAIN_CONFIG", false),
		QuotaMode:                         r.boolean("QUOTA_MODE", false),
		JSONEnabled:                       r.boolean("LIMITKIT_JSON_ENABLED", true),
		BackendURL:                        r.str("LIMITKIT_BACKEND_URL", ""),
		RedisClient:                       strings.ToLower(r.str("LIMITKIT_REDIS_CLIENT", "go-redis")),
		OnFailure:                         r.str("LIMITKIT_ON_FAILURE", "local"),
		ReferenceErrors:                   r.boolean("LIMITKIT_REFERENCE_ERRORS", false),
		RedisDeadline:                     r.duration("LIMITKIT_REDIS_DEADLINE", defaultRedisDeadline),
		DrainTimeout:                      r.duration("LIMITKIT_DRAIN_TIMEOUT", 10*time.Second),
		MemoryMaxKeys:                     r.integer("LIMITKIT_MEMORY_MAX_KEYS", 1_000_000),
	}
	for _, d := range strings.Split(r.str("LIMITKIT_CHARGED_DOMAINS", ""), ",") {
		if d = strings.TrimSpace(d); d != "" {
			s.ChargedDomains = append(s.ChargedDomains, d)
		}
	}
	_, s.BackendTypeSet = lookup("BACKEND_TYPE")
	if s.GrpcClientTLSCACert == "" {
		s.GrpcClientTLSCACert = r.str("GRPC_SERVER_TLS_CA_CERT", "") // Envoy Gateway's spelling
	}
	s.loadXDS(&r)
	if s.TLSReloadInterval <= 0 {
		r.fail("LIMITKIT_TLS_RELOAD_INTERVAL", s.TLSReloadInterval.String(), "write a positive duration such as 10s")
	}
	_, s.RedisURLSet = lookup("REDIS_URL")
	s.check(&r)
	for _, ig := range ignoredVars {
		if v, ok := lookup(ig.Name); ok && !neutral(ig.Name, v) {
			s.Ignored = append(s.Ignored, ig)
		}
	}
	if err := errors.Join(r.errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// neutral reports whether v leaves the reference's variable name at a
// value that asks for nothing, so that it is not worth a log line.
func neutral(name, v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	switch name {
	case "USE_STATSD", "USE_DOG_STATSD", "DISABLE_STATS", "REDIS_PERSECOND", "TRACING_ENABLED",
		"RESPONSE_DYNAMIC_METADATA", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
		"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS":
		return v == "false" || v == "0" || v == ""
	}
	return v == ""
}

func (s *Settings) check(r *reader) {
	switch s.LogFormat = strings.ToLower(s.LogFormat); s.LogFormat {
	case "text", "json":
	default:
		r.fail("LOG_FORMAT", s.LogFormat, "write text or json")
	}
	if _, err := ParseLevel(s.LogLevel); err != nil {
		r.errs = append(r.errs, err)
	}
	switch s.BackendType {
	case "", "redis", "memory":
	case "memcache":
		r.errs = append(r.errs, errors.New("BACKEND_TYPE=memcache: limitkit-rls has no memcache store; use redis (REDIS_URL) or LIMITKIT_BACKEND_URL"))
	default:
		r.fail("BACKEND_TYPE", s.BackendType, "write redis or memory")
	}
	switch s.RedisSocketType {
	case "tcp", "unix":
	default:
		r.fail("REDIS_SOCKET_TYPE", s.RedisSocketType, "write tcp or unix")
	}
	switch s.RedisType {
	case "SINGLE", "SENTINEL", "CLUSTER":
	default:
		r.fail("REDIS_TYPE", s.RedisType, "write SINGLE, SENTINEL or CLUSTER")
	}
	switch s.RedisClient {
	case "go-redis", "rueidis":
	default:
		r.fail("LIMITKIT_REDIS_CLIENT", s.RedisClient, "write go-redis or rueidis")
	}
	if s.RedisPoolSize < 1 {
		r.fail("REDIS_POOL_SIZE", strconv.Itoa(s.RedisPoolSize), "write a whole number of at least 1")
	}
	if s.LocalCacheSizeInBytes < 0 {
		r.fail("LOCAL_CACHE_SIZE_IN_BYTES", strconv.Itoa(s.LocalCacheSizeInBytes), "write 0 (off) or a size in bytes")
	}
	if s.NearLimitRatio <= 0 || s.NearLimitRatio > 1 {
		r.fail("NEAR_LIMIT_RATIO", strconv.FormatFloat(s.NearLimitRatio, 'g', -1, 64), "write a number above 0 and at most 1")
	}
	if s.RuntimePollInterval <= 0 {
		r.fail("LIMITKIT_RUNTIME_POLL_INTERVAL", s.RuntimePollInterval.String(), "write a positive duration such as 1s")
	}
	if s.RedisDeadline <= 0 {
		r.fail("LIMITKIT_REDIS_DEADLINE", s.RedisDeadline.String(), "write a positive duration such as 10ms")
	}
	if s.DrainTimeout <= 0 {
		r.fail("LIMITKIT_DRAIN_TIMEOUT", s.DrainTimeout.String(), "write a positive duration such as 10s")
	}
	if s.MemoryMaxKeys < 1 {
		r.fail("LIMITKIT_MEMORY_MAX_KEYS", strconv.Itoa(s.MemoryMaxKeys), "write a whole number of at least 1")
	}
	if s.GrpcServerUseTLS && (s.GrpcServerTLSCert == "" || s.GrpcServerTLSKey == "") {
		r.errs = append(r.errs, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
	}
	if !strings.HasPrefix(s.PrometheusPath, "/") {
		r.fail("PROMETHEUS_PATH", s.PrometheusPath, "write a path starting with /")
	}
}

// Memory reports whether the settings ask for the in-memory store: no
// LIMITKIT_BACKEND_URL, and BACKEND_TYPE=memory or neither BACKEND_TYPE nor
// REDIS_URL set.
func (s *Settings) Memory() bool {
	if s.BackendURL != "" {
		return false
	}
	return s.BackendType == "memory" || (!s.BackendTypeSet && !s.RedisURLSet)
}

// reader parses variables, collecting every error.
type reader struct {
	lookup Lookup
	errs   []error
}

func (r *reader) fail(name, value, fix string) {
	r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, clip(value), fix))
}

func (r *reader) str(name, def string) string {
	if v, ok := r.lookup(name); ok {
		return strings.TrimSpace(v)
	}
	return def
}

func (r *reader) integer(name string, def int) int {
	v, ok := r.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		r.fail(name, v, "write a whole number")
		return def
	}
	return n
}

func (r *reader) port(name string, def int) int {
	n := r.integer(name, def)
	if n < 0 || n > 65535 {
		r.fail(name, strconv.Itoa(n), "write a port from 0 to 65535")
	}
	return n
}

func (r *reader) float(name string, def float64) float64 {
	v, ok := r.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		r.fail(name, v, "write a number such as 0.8")
		return def
	}
	return f
}

func (r *reader) boolean(name string, def bool) bool {
	v, ok := r.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		r.fail(name, v, "write true or false")
		return def
	}
	return b
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	v, ok := r.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		r.fail(name, v, "write a duration such as 10s or 1h")
		return def
	}
	return d
}

// clip bounds a value quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

package main

// What the service says at start: its settings (secrets hidden), the
// variables it does not know, and go-redis's own lines through slog.

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/rls/internal/envsettings"
)

// logSettings logs, at INFO, what the service starts with: where its
// configuration comes from, its store and how a Redis failure is
// decided. No password is written: REDIS_AUTH and REDIS_SENTINEL_AUTH are
// only said to be set, and the URLs' userinfo and secret options are
// hidden.
func logSettings(log *slog.Logger, s *envsettings.Settings) {
	config := []any{"config_type", s.ConfigType}
	if s.ConfigType == envsettings.ConfigXDS {
		config = append(config, "xds_server", s.XDS.ServerURL, "xds_node", s.XDS.NodeID, "xds_tls", s.XDS.UseTLS)
	} else {
		config = append(config, "runtime_root", s.RuntimeRoot, "runtime_subdirectory", s.RuntimeSubdirectory,
			"runtime_appdirectory", s.RuntimeAppDirectory, "runtime_watch_root", s.RuntimeWatchRoot)
	}
	log.Info("configuration source", config...)
	store := []any{"store", storeSetting(s)}
	if !s.Memory() {
		store = append(store, "redis_client", s.RedisClient, "redis_pool_size", s.RedisPoolSize, "redis_tls", s.RedisTLS,
			"redis_auth", setOrNot(s.RedisAuth), "redis_deadline", s.RedisDeadline, "on_failure", s.OnFailure,
			"local_cache_size_in_bytes", s.LocalCacheSizeInBytes)
	}
	log.Info("store setting", store...)
	log.Info("decision settings", "default_algorithm", "fixed_window (a limit's algorithm: field picks another)",
		"shadow_mode", s.ShadowMode, "quota_mode", s.QuotaMode, "merge_domain_config", s.MergeDomainConfig,
		"near_limit_ratio", s.NearLimitRatio, "cache_key_prefix", s.CacheKeyPrefix,
		"response_headers", s.ResponseHeadersEnabled, "log_level", s.LogLevel)
}

// storeSetting names the store the settings ask for, secrets hidden.
func storeSetting(s *envsettings.Settings) string {
	switch {
	case s.Memory():
		return "memory"
	case s.BackendURL != "":
		return "LIMITKIT_BACKEND_URL=" + redactOptions(storeurl.RedactURL(s.BackendURL))
	}
	return fmt.Sprintf("REDIS_TYPE=%s REDIS_SOCKET_TYPE=%s REDIS_URL=%s", s.RedisType, s.RedisSocketType, redactOptions(redactList(s.RedisURL)))
}

// setOrNot says whether a secret is set, without it.
func setOrNot(secret string) string {
	if secret == "" {
		return "unset"
	}
	return "set"
}

// redactOptions hides the values of a URL's query options that may be
// secrets (a sentinel's password, a user name); the userinfo is
// RedactURL's.
func redactOptions(raw string) string {
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err == nil && secretOption(key) {
			parts[i] = k + "=xxxxx"
		}
	}
	return base + "?" + strings.Join(parts, "&")
}

// secretOption reports a query option that may hold a secret.
func secretOption(key string) bool {
	key = strings.ToLower(key)
	for _, w := range []string{"pass", "user", "auth", "secret", "token"} {
		if strings.Contains(key, w) {
			return true
		}
	}
	return false
}

// knownVariables are the names envsettings reads, found by reading the
// settings once through a lookup that records them: a variable added
// there is known here without a list to keep.
var knownVariables = sync.OnceValue(func() []string {
	var names []string
	_, _ = envsettings.Load(func(name string) (string, bool) {
		names = append(names, name)
		return "", false
	})
	names = append(names, referenceOnly...)
	slices.Sort(names)
	return slices.Compact(names)
})

// referenceOnly are the reference's variables (envoyproxy/ratelimit's
// settings.go) envsettings does not read: memcache's, tracing's and a few
// per-second Redis ones. They are no misspelling, so no warning.
var referenceOnly = []string{
	"MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TIMEOUT",
	"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
}

// repositoryTestVariables are the variables limitkit's own tests,
// benchmarks and CI read. A contributor exports them in the shell that
// also runs the service, so they are no misspelling: no warning.
// TestRepositoryTestVariablesListed keeps the list complete.
var repositoryTestVariables = []string{
	"LIMITKIT_BENCH_RESERVE", "LIMITKIT_BLIP_EMPTIED", "LIMITKIT_BLIP_FIGURES", "LIMITKIT_CPU_PIN", "LIMITKIT_FUZZTIME", "LIMITKIT_MODEL_SEED", "LIMITKIT_MODEL_STEPS",
	"LIMITKIT_PACKAGE_BUDGET", "LIMITKIT_PARTS_ADDR", "LIMITKIT_PARTS_CALLGRIND", "LIMITKIT_PARTS_N", "LIMITKIT_PARTS_ONLY",
	"LIMITKIT_PARTS_WINDOW_MS", "LIMITKIT_PLAIN_STEPS", "LIMITKIT_RELEASE_REHEARSAL", "LIMITKIT_REQUIRE_REDIS",
	"LIMITKIT_RLS_LATENCY", "LIMITKIT_SOAK", "LIMITKIT_STATICCHECK",
}

// warnUnknownVariables warns about each variable of environ (NAME=value
// entries) that is a LIMITKIT_* one the service does not read, or near
// the name of one it reads (REDIS_URLL): a misspelt setting is otherwise
// ignored without a word. Values are never logged.
func warnUnknownVariables(log *slog.Logger, environ []string) {
	known := knownVariables()
	for _, entry := range environ {
		name, _, _ := strings.Cut(entry, "=")
		if name == "" || slices.Contains(known, name) || slices.Contains(repositoryTestVariables, name) {
			continue
		}
		near := configtree.Nearest(name, known)
		switch {
		case strings.HasPrefix(name, "LIMITKIT_"):
			log.Warn("unknown LIMITKIT_ variable ignored"+didYouMean(near), "name", name)
		case near != "" && !serviceLink(name):
			log.Warn("variable ignored: not a setting of limitkit-rls or the reference"+didYouMean(near), "name", name)
		}
	}
}

// serviceLink reports a name Kubernetes sets for each service of the
// namespace (REDIS_PORT, REDIS_SERVICE_HOST, REDIS_PORT_6379_TCP_ADDR):
// near a setting's name by chance, not a misspelling.
func serviceLink(name string) bool {
	return strings.HasSuffix(name, "_PORT") || strings.Contains(name, "_PORT_") || strings.Contains(name, "_SERVICE_")
}

func didYouMean(near string) string {
	if near == "" {
		return ""
	}
	return " (did you mean " + near + "?)"
}

// goRedisLogger writes go-redis's lines (a failed dial, a pool's trouble)
// to the service's logger at WARN, instead of raw to standard error.
type goRedisLogger struct{ log *slog.Logger }

func (l goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "source", "go-redis")
}

// routeGoRedis sends go-redis's lines to log. go-redis has one logger per
// process; the last service started gets them.
func routeGoRedis(log *slog.Logger) { redis.SetLogger(goRedisLogger{log: log}) }

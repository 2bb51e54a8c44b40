package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/observe/promobserve"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/rls"
	"github.com/limitkit/limitkit/rls/internal/envsettings"
	"github.com/limitkit/limitkit/rls/internal/metrics"
	"github.com/limitkit/limitkit/rls/internal/runtimedir"
)

// healthService is the name gRPC health reports under, the reference's.
const healthService = "ratelimit"

// addrs are the addresses the server listens on, once it does.
type addrs struct {
	GRPC, HTTP, Debug, Prometheus string
}

// server is one running service: its listeners, health and rules.
type server struct {
	s       *envsettings.Settings
	log     *slog.Logger
	svc     *rls.Service
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	health  *health.Server
	serving atomic.Bool
	// files are those of the rules in force, for /rlconfig.
	files atomic.Pointer[[]string]
	// algorithms are those the rules last compiled use, for the log.
	algorithms atomic.Pointer[[]string]
}

// run serves until ctx ends (SIGTERM in main), then drains. ready, when
// not nil, is called with the bound addresses once every listener is open.
func run(ctx context.Context, lookup envsettings.Lookup, logOut io.Writer, ready func(addrs)) error {
	return runEnv(ctx, lookup, nil, logOut, ready)
}

// runEnv is run warning about the variables of environ (os.Environ's
// NAME=value entries) that are no setting (see warnUnknownVariables).
func runEnv(ctx context.Context, lookup envsettings.Lookup, environ []string, logOut io.Writer, ready func(addrs)) error {
	s, err := envsettings.Load(lookup)
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	log := s.Logger(logOut)
	routeGoRedis(log)
	log.Warn("starting limitkit-rls", "version", version())
	logSettings(log, s)
	for _, ig := range s.Ignored {
		log.Warn("setting ignored", "name", ig.Name, "reason", ig.Reason)
	}
	warnUnknownVariables(log, environ)
	policy, err := backend.ParseFailurePolicy(s.OnFailure)
	if err != nil {
		return fmt.Errorf("LIMITKIT_ON_FAILURE: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rm, err := metrics.New(reg)
	if err != nil {
		return err
	}
	pm, err := promobserve.New(reg)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, s, policy, log, fallback.WithStateHook(pm.BreakerHook("redis")))
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Warn("closing the store", "err", err)
		}
	}()
	log.Info("store opened", "store", st.describe)
	if err := st.registerEvictions(reg); err != nil {
		return err
	}
	if s.Memory() {
		log.Warn("running on the in-memory store: each instance counts alone; set REDIS_URL or LIMITKIT_BACKEND_URL to share counts")
	}

	srv := &server{s: s, log: log, metrics: rm, reg: reg, health: health.NewServer()}
	srv.setServing(false)
	dir := runtimedir.Options{Root: s.RuntimeRoot, Subdirectory: s.RuntimeSubdirectory, AppDirectory: s.RuntimeAppDirectory,
		WatchRoot: s.RuntimeWatchRoot, IgnoreDotFiles: s.RuntimeIgnoreDotFiles, Log: log}
	var first runtimedir.Snapshot
	var rules *rls.Rules
	if s.ConfigType == envsettings.ConfigFile { // else from xDS: startXDS below
		first = dir.Read()
		rules, err = srv.compile(first)
		if err != nil {
			if !s.ForceStartWithoutInitialConfig {
				return fmt.Errorf("no rate limit configuration loaded from %s: %w (fix it, or set FORCE_START_WITHOUT_INITIAL_CONFIG=true to start NOT_SERVING until one loads)", dir.Dir(), err)
			}
			log.Error("starting without configuration (FORCE_START_WITHOUT_INITIAL_CONFIG): health is NOT_SERVING until one loads", "dir", dir.Dir(), "err", err)
			rules = nil
		}
	}
	opts := []rls.Option{rls.WithShadowMode(s.ShadowMode), rls.WithQuotaMode(s.QuotaMode), rls.WithFailurePolicy(policy), rls.WithErrorOnFailure(s.ReferenceErrors),
		rls.WithNearLimitRatio(s.NearLimitRatio), rls.WithStats(func(x rls.Stat) {
			rm.Record(x.Domain, x.Key, metrics.Counts{Total: x.Hits, Over: x.OverLimit, Near: x.NearLimit, Within: x.WithinLimit, Shadow: x.ShadowMode})
		})}
	if s.ResponseHeadersEnabled {
		opts = append(opts, rls.WithResponseHeaders(rls.HeaderNames{Limit: s.HeaderLimit, Remaining: s.HeaderRemaining, Reset: s.HeaderReset}))
	}
	if s.CacheKeyPrefix != "" {
		opts = append(opts, rls.WithKeyPrefix(s.CacheKeyPrefix))
	}
	if len(s.ChargedDomains) > 0 {
		opts = append(opts, rls.WithChargedDomains(s.ChargedDomains...))
	}
	srv.svc, err = rls.New(observe.Wrap(st.store, pm.Observer()), rules, opts...)
	if err != nil {
		return err
	}
	if rules != nil {
		srv.applied(fileNames(first), rules)
	}
	watch := func(ctx context.Context) { dir.Watch(ctx, s.RuntimePollInterval, first, srv.reload) }
	if s.ConfigType == envsettings.ConfigXDS {
		stop, err := srv.startXDS(ctx)
		if err != nil {
			return err
		}
		defer stop()
		watch = nil
	}
	return srv.serve(ctx, watch, ready)
}

// compile turns a snapshot of the runtime directory into rules, counting
// the outcome in config_load_success or config_load_error.
func (srv *server) compile(snap runtimedir.Snapshot) (*rls.Rules, error) {
	err := snap.Err
	var rules *rls.Rules
	if err == nil {
		files := make([]rls.File, len(snap.Files))
		for i, f := range snap.Files {
			files[i] = rls.File{Name: f.Name, Data: f.Data}
		}
		rules, err = srv.newRules(files...)
	}
	srv.metrics.ConfigLoaded(err == nil)
	return rules, err
}

// newRules compiles files, merging the files of one domain under
// MERGE_DOMAIN_CONFIG.
func (srv *server) newRules(files ...rls.File) (*rls.Rules, error) {
	configs := make([]*rls.DomainConfig, len(files))
	for i, f := range files {
		c, err := rls.ParseConfig(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		configs[i] = c
	}
	var rules *rls.Rules
	var err error
	if srv.s.MergeDomainConfig {
		rules, err = rls.NewMergedRules(files...) // merges before compiling: parses again
	} else {
		rules, err = rls.Compile(configs...)
	}
	if err == nil {
		algs := algorithmsOf(configs)
		srv.algorithms.Store(&algs)
	}
	return rules, err
}

// algorithmsOf lists the algorithms the limits of configs use, sorted.
func algorithmsOf(configs []*rls.DomainConfig) []string {
	seen := map[string]bool{}
	var walk func([]*rls.Descriptor)
	walk = func(ds []*rls.Descriptor) {
		for _, d := range ds {
			for _, l := range d.Limits {
				seen[string(l.Algorithm)] = true
			}
			walk(d.Descriptors)
		}
	}
	for _, c := range configs {
		walk(c.Descriptors)
	}
	return slices.Sorted(maps.Keys(seen))
}

// applied records rules, compiled from the files (or xDS resources)
// names, as in force.
func (srv *server) applied(names []string, rules *rls.Rules) {
	srv.files.Store(&names)
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: a configuration of no
	// domain is no configuration, as in the reference.
	serving := !srv.s.HealthyWithAtLeastOneConfigLoaded || len(rules.Domains()) > 0
	srv.setServing(serving)
	var algs []string
	if p := srv.algorithms.Load(); p != nil {
		algs = *p
	}
	srv.log.Info("rate limit configuration loaded", "from", names, "domains", rules.Domains(), "algorithms", algs)
	if !serving {
		srv.log.Warn("no domain loaded: NOT_SERVING until one is (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	}
}

// fileNames lists a snapshot's files.
func fileNames(snap runtimedir.Snapshot) []string {
	names := make([]string, len(snap.Files))
	for i, f := range snap.Files {
		names[i] = f.Name
	}
	return names
}

// reload applies a changed runtime directory, or keeps the last good
// rules when it does not compile.
func (srv *server) reload(snap runtimedir.Snapshot) {
	rules, err := srv.compile(snap)
	if err != nil {
		msg := "rate limit configuration refused; the last good one stays in force"
		if srv.svc.Rules() == nil {
			msg = "rate limit configuration refused; still none loaded (NOT_SERVING)"
		}
		srv.log.Error(msg, "err", err)
		return
	}
	srv.svc.SetRules(rules)
	srv.applied(fileNames(snap), rules)
}

// setServing sets gRPC health (service "ratelimit" and the server as a
// whole) and /healthcheck.
func (srv *server) setServing(ok bool) {
	srv.serving.Store(ok)
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		status = healthpb.HealthCheckResponse_SERVING
	}
	srv.health.SetServingStatus(healthService, status)
	srv.health.SetServingStatus("", status)
}

// serve opens the listeners, serves until ctx ends and drains.
// watch, when not nil, follows the configuration's source until its
// context ends.
func (srv *server) serve(ctx context.Context, watch func(context.Context), ready func(addrs)) (err error) {
	s := srv.s
	ls, err := srv.listen()
	defer ls.close()
	if err != nil {
		return err
	}
	gopts, err := srv.grpcOptions()
	if err != nil {
		return err
	}
	gs := grpc.NewServer(gopts...)
	rls.Register(gs, srv.svc)
	healthpb.RegisterHealthServer(gs, srv.health)
	hs, ds := newHTTPServer(srv.httpMux()), newHTTPServer(srv.debugMux())
	servers := []*http.Server{hs, ds}
	var ps *http.Server
	if ls.prometheus != nil {
		ps = newHTTPServer(srv.prometheusMux())
		servers = append(servers, ps)
	}

	failed := make(chan error, 4)
	var wg sync.WaitGroup
	goServe := func(name string, fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				failed <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	goServe("gRPC", func() error { return gs.Serve(ls.grpc) })
	goServe("HTTP", func() error { return hs.Serve(ls.http) })
	goServe("debug", func() error { return ds.Serve(ls.debug) })
	if ps != nil {
		goServe("prometheus", func() error { return ps.Serve(ls.prometheus) })
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	if watch != nil {
		wg.Go(func() { watch(watchCtx) })
	}
	a := ls.addrs
	srv.log.Warn("listening", "grpc", a.GRPC, "http", a.HTTP, "debug", a.Debug, "prometheus", a.Prometheus)
	if ready != nil {
		ready(a)
	}

	select {
	case <-ctx.Done():
		srv.log.Warn("shutting down: health NOT_SERVING, draining in-flight calls", "timeout", s.DrainTimeout)
	case err = <-failed:
		srv.log.Error("a listener failed; shutting down", "err", err)
	}
	srv.setServing(false)
	srv.health.Shutdown()
	stopWatch()
	srv.drain(gs, servers)
	wg.Wait()
	return err
}

// listeners are the server's open listeners (prometheus nil unless
// USE_PROMETHEUS) and their addresses.
type listeners struct {
	grpc, http, debug, prometheus net.Listener
	addrs
	opened []io.Closer
}

// close closes every listener opened.
func (ls *listeners) close() {
	for _, c := range ls.opened {
		_ = c.Close()
	}
}

// listen opens the listeners the settings name. The listeners opened are
// returned even with an error, for the caller to close.
func (srv *server) listen() (*listeners, error) {
	s := srv.s
	ls := &listeners{}
	open := func(network, addr string) (net.Listener, error) {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		ls.opened = append(ls.opened, l)
		return l, nil
	}
	grpcNet, grpcAddr := "tcp", net.JoinHostPort(s.GrpcHost, strconv.Itoa(s.GrpcPort))
	if s.GrpcUDS != "" {
		grpcNet, grpcAddr = "unix", s.GrpcUDS
	}
	var err error
	if ls.grpc, err = open(grpcNet, grpcAddr); err != nil {
		return ls, err
	}
	if ls.http, err = open("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port))); err != nil {
		return ls, err
	}
	if ls.debug, err = open("tcp", net.JoinHostPort(s.DebugHost, strconv.Itoa(s.DebugPort))); err != nil {
		return ls, err
	}
	ls.GRPC, ls.HTTP, ls.Debug = ls.grpc.Addr().String(), ls.http.Addr().String(), ls.debug.Addr().String()
	if s.UsePrometheus {
		if ls.prometheus, err = open("tcp", s.PrometheusAddr); err != nil {
			return ls, err
		}
		ls.Prometheus = ls.prometheus.Addr().String()
	}
	return ls, nil
}

// drain lets gs finish its calls within the drain timeout (then closes
// those left), and shuts the HTTP servers down.
func (srv *server) drain(gs *grpc.Server, servers []*http.Server) {
	s := srv.s
	drained := make(chan struct{})
	go func() { gs.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.DrainTimeout):
		srv.log.Error("drain timed out; closing the calls left", "timeout", s.DrainTimeout)
		gs.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
	defer cancel()
	for _, h := range servers {
		_ = h.Shutdown(sctx)
	}
}

// newHTTPServer returns a server of the HTTP endpoints. It bounds how long
// a client may take to send its headers and keep an idle connection open,
// so that slow or idle clients cannot hold the service's connections. It
// sets no write timeout: a CPU profile on the debug port takes 30 s.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/limitkit/limitkit/rls/internal/certreload"
	"github.com/limitkit/limitkit/rls/internal/xds"
)

// startXDS subscribes to the xDS server (CONFIG_TYPE=GRPC_XDS_SOTW) until
// ctx ends. Without FORCE_START_WITHOUT_INITIAL_CONFIG it returns once the
// first configuration is in force, as the reference waits for its first
// before serving; with it, at once, NOT_SERVING until then. stop ends the
// subscription and waits for it.
func (srv *server) startXDS(ctx context.Context) (stop func(), err error) {
	x := srv.s.XDS
	var conf *tls.Config
	if x.UseTLS {
		if conf, err = srv.xdsTLS(); err != nil {
			return nil, err
		}
	}
	first := make(chan struct{})
	var once sync.Once
	xctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	opts := xds.Options{
		ServerURL: x.ServerURL, NodeID: x.NodeID, NodeMetadata: x.NodeMetadata, Headers: x.Headers, TLS: conf,
		ConnectRetryInterval: x.ConnectRetryInterval, MaxRecvMsgSize: x.MaxMsgSizeInBytes,
		Backoff: xds.Backoff{Initial: x.BackoffInitial, Max: x.BackoffMax, RandomFactor: x.BackoffRandomFactor, Jitter: x.BackoffJitter},
		Log:     srv.log.With("source", "xds"),
		Apply: func(configs []*rlsconfv3.RateLimitConfig) error {
			if err := srv.applyXDS(xctx, configs); err != nil {
				return err
			}
			once.Do(func() { close(first) })
			return nil
		},
	}
	go func() { done <- xds.Run(xctx, opts) }()
	stop = func() {
		cancel()
		<-done
	}
	srv.log.Info("rate limit configuration from xDS", "server", x.ServerURL, "node", x.NodeID, "tls", x.UseTLS)
	if srv.s.ForceStartWithoutInitialConfig {
		return stop, nil
	}
	srv.log.Warn("waiting for the first rate limit configuration from the xDS server before listening (FORCE_START_WITHOUT_INITIAL_CONFIG=true listens at once, NOT_SERVING)", "server", x.ServerURL)
	select {
	case <-first:
		return stop, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("no rate limit configuration from the xDS server %s before shutdown: %w", x.ServerURL, ctx.Err())
	}
}

// applyXDS compiles one xDS configuration, as a changed runtime directory
// is, and puts it in force with the counts kept, or returns why not (the
// NACK's reason), keeping the last good one.
func (srv *server) applyXDS(ctx context.Context, configs []*rlsconfv3.RateLimitConfig) error {
	rules, err := xds.Compile(configs, srv.newRules)
	srv.metrics.ConfigLoaded(err == nil)
	if err != nil {
		msg := "rate limit configuration from xDS refused; the last good one stays in force"
		if srv.svc.Rules() == nil {
			msg = "rate limit configuration from xDS refused; still none loaded (NOT_SERVING)"
		}
		srv.log.Error(msg, "err", err)
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: leave health as the drain set it
	}
	names := make([]string, len(configs))
	for i, c := range configs {
		names[i] = xds.Name(c)
	}
	srv.svc.SetRules(rules)
	srv.applied(names, rules)
	return nil
}

// xdsTLS is the xDS client's TLS: its certificate (CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY)
// and the server's CA (CONFIG_GRPC_XDS_SERVER_TLS_CACERT) read again when
// they change; the server's name is CONFIG_GRPC_XDS_SERVER_TLS_SAN, or the
// URL's host.
func (srv *server) xdsTLS() (*tls.Config, error) {
	x := srv.s.XDS
	files := certreload.Files{Cert: x.ClientTLSCert, Key: x.ClientTLSKey, CA: x.ServerTLSCA,
		Name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT"}
	if files.Cert == "" && files.CA == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.ServerTLSSAN}, nil // the system's roots
	}
	r, err := certreload.New(files, srv.s.TLSReloadInterval, srv.log)
	if err != nil {
		return nil, err
	}
	name := x.ServerTLSSAN
	if name == "" {
		if host, _, err := net.SplitHostPort(x.ServerURL); err == nil {
			name = host
		}
	}
	return r.ClientConfig(name), nil
}

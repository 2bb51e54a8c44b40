package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"path"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a POST /json request.
const maxJSONBody = 1 << 20

// jsonReadTimeout bounds the reading of a /json body (the headers are
// bounded by the server's ReadHeaderTimeout): a client trickling its body
// holds a connection no longer. A variable for the test.
var jsonReadTimeout = 5 * time.Second

// grpcOptions are the gRPC server's: connection age (GRPC_MAX_CONNECTION_AGE
// and its grace), TLS when GRPC_SERVER_USE_TLS, and the request metrics.
func (srv *server) grpcOptions() ([]grpc.ServerOption, error) {
	s := srv.s
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.GrpcMaxConnectionAge, MaxConnectionAgeGrace: s.GrpcMaxConnectionAgeGrace}),
		grpc.ChainUnaryInterceptor(srv.observeCall),
	}
	if !s.GrpcServerUseTLS {
		return opts, nil
	}
	conf, err := srv.serverTLS() // reloaded when the files change: tls.go
	if err != nil {
		return nil, err
	}
	return append(opts, grpc.Creds(credentials.NewTLS(conf))), nil
}

// observeCall counts every gRPC call and its latency under the
// reference's names, and ShouldRateLimit's errors.
func (srv *server) observeCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	srv.metrics.CallStarted()
	defer srv.metrics.CallDone()
	start := time.Now()
	resp, err := handler(ctx, req)
	method := path.Base(info.FullMethod)
	srv.metrics.Request(method, time.Since(start).Seconds())
	if err != nil && method == "ShouldRateLimit" {
		kind := "service_error"
		if status.Code(err) == codes.Unavailable && srv.svc.Rules() != nil {
			kind = "redis_error"
		}
		srv.metrics.CallError(kind)
	}
	return resp, err
}

// httpMux serves the reference's HTTP port: /healthcheck and POST /json
// (unless LIMITKIT_JSON_ENABLED=false: then /json is not found).
func (srv *server) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", srv.healthcheck)
	if srv.s == nil || srv.s.JSONEnabled {
		mux.HandleFunc("/json", srv.json)
	}
	return mux
}

func (srv *server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if !srv.serving.Load() {
		http.Error(w, "NOT_SERVING", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// json is the reference's POST /json: a RateLimitRequest in protobuf's
// JSON, answered with the RateLimitResponse, 429 when over the limit.
func (srv *server) json(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a RateLimitRequest in JSON", http.StatusMethodNotAllowed)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(jsonReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "the body is not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := srv.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusBadRequest
		if status.Code(err) == codes.Unavailable {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlsv3.RateLimitResponse_UNKNOWN:
		w.WriteHeader(http.StatusInternalServerError)
	}
	_, _ = w.Write(out)
}

// debugMux serves DEBUG_PORT: pprof, /metrics, /rlconfig and an index.
func (srv *server) debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/debug/pprof/":        "root of the pprof endpoints",
		"/debug/pprof/profile": "CPU profile",
		"/debug/pprof/trace":   "execution trace",
		"/metrics":             "Prometheus metrics (the reference's and limitkit's)",
		"/rlconfig":            "the files and domains of the configuration in force",
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/metrics", srv.metricsHandler())
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		rules := srv.svc.Rules()
		if rules == nil {
			_, _ = io.WriteString(w, "no configuration loaded\n")
			return
		}
		if f := srv.files.Load(); f != nil {
			fmt.Fprintf(w, "files: %s\n", strings.Join(*f, ", "))
		}
		fmt.Fprintf(w, "domains: %s\n", strings.Join(rules.Domains(), ", "))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		keys := make([]string, 0, len(endpoints))
		for k := range endpoints {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s: %s\n", k, endpoints[k])
		}
	})
	return mux
}

// prometheusMux serves PROMETHEUS_PATH on PROMETHEUS_ADDR (USE_PROMETHEUS).
func (srv *server) prometheusMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(srv.s.PrometheusPath, srv.metricsHandler())
	return mux
}

func (srv *server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(srv.reg, promhttp.HandlerOpts{})
}

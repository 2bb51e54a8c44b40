// Package xds takes limitkit-rls's rate limit configuration from an xDS
// server, as the reference server does with CONFIG_TYPE=GRPC_XDS_SOTW and
// as Envoy Gateway serves it: one aggregated (ADS) stream, state of the
// world, resource type ratelimit.config.ratelimit.v3.RateLimitConfig.
//
// Every response is the whole configuration. It is converted to the
// reference's file format and compiled by the same code as files
// (Compile); what compiles is applied and acknowledged, what does not is
// refused (NACK) with the reason, and the last good configuration stays.
//
// The stream is go-control-plane's ADS client (pkg/client/sotw/v3), a
// new one per stream: a stream opened after the server restarted starts
// with no version, so the server sends what it has even when its
// versions started again at the one last acknowledged.
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TypeURL is the resource type subscribed to.
const TypeURL = resource.RateLimitConfigType

// Options configure Run. The zero values of the durations are refused.
type Options struct {
	// ServerURL is the server's gRPC target, such as "envoy-gateway:18001".
	ServerURL string
	// NodeID and NodeMetadata describe this client to the server; the
	// server keys its snapshots by the node id.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream.
	Headers map[string]string
	// TLS, when not nil, secures the connection; nil is plain text.
	TLS *tls.Config
	// ConnectRetryInterval is how often a lost connection is dialled
	// again (each wait moved at random by up to half).
	ConnectRetryInterval time.Duration
	// Backoff paces streams that fail before delivering anything.
	Backoff Backoff
	// MaxRecvMsgSize is the largest response accepted; 0 is gRPC's 4 MiB.
	MaxRecvMsgSize int
	// Apply is given every configuration the server sends, in order,
	// and returns why it refuses one. It is called from one goroutine.
	Apply func(configs []*rlsconfv3.RateLimitConfig) error
	// Log receives connection and refusal events; nil logs nothing.
	Log *slog.Logger
}

// Backoff is an exponential backoff: Initial, doubling up to Max, each
// wait moved at random by up to RandomFactor of itself when Jitter.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// next returns the wait before attempt n (0 first).
func (b Backoff) next(n int) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter && b.RandomFactor > 0 {
		delta := b.RandomFactor * float64(d)
		d = time.Duration(float64(d) - delta + rand.Float64()*2*delta)
	}
	return d
}

// firstRepeatedNack is the wait before refusing again a configuration
// already refused on this stream: go-control-plane's cache (Envoy
// Gateway's) sends a refused snapshot again at once, and would otherwise
// keep both ends busy. The wait doubles up to Backoff.Max.
var firstRepeatedNack = time.Second // a variable for the test that shows the loop without it

// maxErrorDetail bounds the reason sent with a NACK.
const maxErrorDetail = 4096

// Run subscribes and applies configurations until ctx ends, reopening the
// stream whenever it breaks: at once when the stream had delivered a
// response (the server went away: a restart, a new leader), after the
// backoff when it had not. It returns an error only for options it
// cannot use; otherwise nil when ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.ServerURL == "" || o.NodeID == "" || o.Apply == nil {
		return errors.New("xds: the server URL, the node id and Apply are required")
	}
	if o.ConnectRetryInterval <= 0 || o.Backoff.Initial <= 0 || o.Backoff.Max < o.Backoff.Initial {
		return errors.New("xds: the retry interval and the backoff must be positive, the max at least the initial")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: o.ConnectRetryInterval, Multiplier: 1, Jitter: 0.5, MaxDelay: o.ConnectRetryInterval},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if o.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(o.ServerURL, dial...)
	if err != nil {
		return fmt.Errorf("xds: CONFIG_GRPC_XDS_SERVER_URL %q: %w", o.ServerURL, err)
	}
	defer conn.Close()
	node := &corev3.Node{Id: o.NodeID, UserAgentName: "limitkit-rls"}
	if len(o.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
		for k, v := range o.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	md := metadata.New(o.Headers)

	failures := 0
	for ctx.Err() == nil {
		delivered, err := o.stream(ctx, conn, node, md)
		if ctx.Err() != nil {
			break
		}
		if delivered {
			failures = 0
			o.Log.Warn("xDS stream ended; subscribing again", "server", o.ServerURL, "err", err)
			continue
		}
		wait := o.Backoff.next(failures)
		failures++
		o.Log.Warn("xDS stream failed; retrying", "server", o.ServerURL, "in", wait.Round(time.Millisecond), "err", err)
		if !sleep(ctx, wait) {
			break
		}
	}
	return nil
}

// stream runs one ADS stream until it breaks, and reports whether it
// delivered a response.
func (o *Options) stream(ctx context.Context, conn *grpc.ClientConn, node *corev3.Node, md metadata.MD) (bool, error) {
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	defer cancel()
	ads := sotw.NewADSClient(sctx, node, TypeURL)
	if err := ads.InitConnect(conn); err != nil {
		return false, err
	}
	o.Log.Info("xDS stream open; waiting for the rate limit configuration", "server", o.ServerURL, "node", node.GetId())
	delivered := false
	var refused []*rlsconfv3.RateLimitConfig // the last refused, decoded
	var refusedWhy string
	repeats := 0
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return delivered, err
		}
		delivered = true
		configs, err := decode(resp.Resources)
		if err != nil {
			o.Log.Error("xDS response refused", "err", err)
			if err := ads.Nack(clip(err.Error())); err != nil {
				return true, err
			}
			continue
		}
		if refused != nil && sameConfigs(configs, refused) {
			// Sent again unchanged: refuse again, paced.
			wait := min(firstRepeatedNack<<min(repeats, 16), max(o.Backoff.Max, firstRepeatedNack))
			repeats++
			o.Log.Debug("xDS server sent a refused configuration again; refusing it again", "in", wait)
			if !sleep(sctx, wait) {
				return true, sctx.Err()
			}
			if err := ads.Nack(refusedWhy); err != nil {
				return true, err
			}
			continue
		}
		if err := o.Apply(configs); err != nil {
			refused, refusedWhy, repeats = configs, clip(err.Error()), 0
			if err := ads.Nack(refusedWhy); err != nil {
				return true, err
			}
			continue
		}
		refused, refusedWhy, repeats = nil, "", 0
		if err := ads.Ack(); err != nil {
			return true, err
		}
	}
}

// decode unpacks a response's resources.
func decode(resources []*anypb.Any) ([]*rlsconfv3.RateLimitConfig, error) {
	out := make([]*rlsconfv3.RateLimitConfig, 0, len(resources))
	for i, r := range resources {
		if r.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resource %d is a %q; only %s is read", i, clip(r.GetTypeUrl()), TypeURL)
		}
		c := &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(c); err != nil {
			return nil, fmt.Errorf("resource %d does not decode as a RateLimitConfig: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func sameConfigs(a, b []*rlsconfv3.RateLimitConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > maxErrorDetail {
		return s[:maxErrorDetail] + "..."
	}
	return s
}

// sleep waits d or until ctx ends, and reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

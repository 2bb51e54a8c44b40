package envsettings

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The values of CONFIG_TYPE.
const (
	// ConfigFile reads the limits from the runtime directory (the default).
	ConfigFile = "FILE"
	// ConfigXDS takes the limits from an xDS server over ADS,
	// state of the world, as Envoy Gateway sends them.
	ConfigXDS = "GRPC_XDS_SOTW"
)

// XDS is the xDS configuration source, read when CONFIG_TYPE=GRPC_XDS_SOTW.
// The names and defaults are the reference's.
type XDS struct {
	// CONFIG_GRPC_XDS_NODE_ID (default): the node the server keys its
	// snapshots by (Envoy Gateway: envoy-ratelimit).
	NodeID string
	// CONFIG_GRPC_XDS_NODE_METADATA (""): node metadata, "k1=v1,k2=v2".
	NodeMetadata map[string]string
	// CONFIG_GRPC_XDS_SERVER_URL (localhost:18000): the server's host:port
	// (or any gRPC target).
	ServerURL string
	// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (3s): how often a
	// lost connection to the server is dialled again.
	ConnectRetryInterval time.Duration
	// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS (""): gRPC metadata sent
	// on the stream, "k1:v1,k2:v2".
	Headers map[string]string
	// CONFIG_GRPC_XDS_SERVER_USE_TLS (false), CONFIG_GRPC_XDS_CLIENT_TLS_CERT
	// and _KEY (the client certificate, optional),
	// CONFIG_GRPC_XDS_SERVER_TLS_CACERT (the server's CA; the system's
	// roots when empty), CONFIG_GRPC_XDS_SERVER_TLS_SAN (the name the
	// server's certificate must carry; the URL's host when empty).
	UseTLS        bool
	ClientTLSCert string
	ClientTLSKey  string
	ServerTLSCA   string
	ServerTLSSAN  string
	// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (10s), _MAX_INTERVAL (60s),
	// _RANDOM_FACTOR (0.5) and _JITTER (true): the wait before opening a
	// stream again after one failed without delivering anything; it
	// doubles from the initial interval up to the max, each wait moved
	// at random by up to the factor when jitter is on.
	BackoffInitial      time.Duration
	BackoffMax          time.Duration
	BackoffRandomFactor float64
	BackoffJitter       bool
	// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's 4 MiB): the largest
	// response accepted.
	MaxMsgSizeInBytes int
}

// loadXDS reads CONFIG_TYPE and the xDS variables.
func (s *Settings) loadXDS(r *reader) {
	s.ConfigType = strings.ToUpper(r.str("CONFIG_TYPE", ConfigFile))
	switch s.ConfigType {
	case ConfigFile, ConfigXDS:
	default:
		r.fail("CONFIG_TYPE", s.ConfigType, "write FILE or GRPC_XDS_SOTW")
	}
	x := &s.XDS
	x.NodeID = r.str("CONFIG_GRPC_XDS_NODE_ID", "default")
	x.NodeMetadata = r.pairs("CONFIG_GRPC_XDS_NODE_METADATA", "=")
	x.ServerURL = r.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000")
	x.ConnectRetryInterval = r.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second)
	x.Headers = r.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":")
	x.UseTLS = r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)
	x.ClientTLSCert = r.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "")
	x.ClientTLSKey = r.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "")
	x.ServerTLSCA = r.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "")
	x.ServerTLSSAN = r.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "")
	x.BackoffInitial = r.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second)
	x.BackoffMax = r.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second)
	x.BackoffRandomFactor = r.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5)
	x.BackoffJitter = r.boolean("XDS_CLIENT_BACKOFF_JITTER", true)
	x.MaxMsgSizeInBytes = r.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0)

	if s.ConfigType != ConfigXDS {
		return
	}
	if x.ServerURL == "" {
		r.fail("CONFIG_GRPC_XDS_SERVER_URL", "", "write the xDS server's host:port")
	}
	if x.NodeID == "" {
		r.fail("CONFIG_GRPC_XDS_NODE_ID", "", "write the node id the xDS server keys its snapshots by")
	}
	if x.ConnectRetryInterval <= 0 {
		r.fail("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", x.ConnectRetryInterval.String(), "write a positive duration such as 3s")
	}
	if x.BackoffInitial <= 0 {
		r.fail("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", x.BackoffInitial.String(), "write a positive duration such as 10s")
	}
	if x.BackoffMax < x.BackoffInitial {
		r.fail("XDS_CLIENT_BACKOFF_MAX_INTERVAL", x.BackoffMax.String(), "write a duration at least XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	}
	if x.BackoffRandomFactor < 0 || x.BackoffRandomFactor > 1 {
		r.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", strconv.FormatFloat(x.BackoffRandomFactor, 'g', -1, 64), "write a number from 0 to 1")
	}
	if x.MaxMsgSizeInBytes < 0 {
		r.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", strconv.Itoa(x.MaxMsgSizeInBytes), "write 0 (gRPC's default) or a size in bytes")
	}
	if (x.ClientTLSCert == "") != (x.ClientTLSKey == "") {
		r.fail("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", x.ClientTLSCert, "set CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY together")
	}
}

// pairs reads "k1<sep>v1,k2<sep>v2" into a map. An entry without sep is
// an error naming the variable.
func (r *reader) pairs(name, sep string) map[string]string {
	v, ok := r.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	out := map[string]string{}
	for _, entry := range strings.Split(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, val, found := strings.Cut(entry, sep)
		k = strings.TrimSpace(k)
		if !found || k == "" {
			// The entry is not quoted: headers may carry credentials.
			r.errs = append(r.errs, fmt.Errorf("%s: an entry has no key or no %q; write key%svalue pairs separated by commas", name, sep, sep))
			continue
		}
		out[k] = strings.TrimSpace(val)
	}
	return out
}

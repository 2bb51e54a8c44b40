package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Settings of StartSentinel's monitoring.
const (
	// SentinelMasterName is the name under which the sentinels monitor the master.
	SentinelMasterName = "mymaster"
	// SentinelQuorum is the number of sentinels that must agree the master
	// is down before a failover.
	SentinelQuorum = 2
	// SentinelDownAfter is the sentinels' down-after-milliseconds: how long
	// the master may not answer before a sentinel deems it down.
	SentinelDownAfter = time.Second
	// SentinelFailoverTimeout is the sentinels' failover-timeout. A failover
	// that fails is retried after twice this time.
	SentinelFailoverTimeout = 5 * time.Second

	numSentinels       = 3
	sentinelKind       = "sentinel"
	sentinelConfigFile = "sentinel.conf"
	sentinelTimeout    = 30 * time.Second // replica in sync, then sentinels aware of everything
	sentinelPoll       = 10 * time.Millisecond
	sentinelQueryLimit = time.Second // one sentinel's answer
)

// Sentinel is a master, one replica and three sentinels monitoring them,
// owned by a test. Master and Replica are the roles at start: after a
// failover ask CurrentMaster.
type Sentinel struct {
	Master     *Server
	Replica    *Server
	Sentinels  []*Server
	MasterName string

	t        testing.TB
	mu       sync.Mutex
	tlsPorts map[*Server]int // each sentinel's TLS port, with WithTLSSentinels
}

// StartSentinel starts a master, a replica (started with --replicaof the
// master, so it is a replica again after Restart) and three sentinels
// (redis-server --sentinel, each with its own writable sentinel.conf)
// monitoring the master as SentinelMasterName with quorum 2, down-after-milliseconds
// 1000, failover-timeout 5000 and parallel-syncs 1, announcing 127.0.0.1
// and never resolving host names. It waits, at most 30 s, until the replica
// is in sync (master_link_status:up) and every sentinel sees the master up,
// the replica with its link ok and the two other sentinels. opts apply to
// the master and the replica. Everything is killed in t.Cleanup.
//
// The sentinels learn of each other through hello messages sent every 2 s,
// so StartSentinel takes about two seconds. After Master.Kill, the replica
// is promoted within a few seconds. A sentinel whose timer runs more than 2 s
// late (a badly overloaded machine) enters TILT mode and takes no action for
// 30 s, which can delay a failover.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	Require(t, redisServerBin)
	o := applyOptions(opts)
	master := startServer(t, o.tlsSpec(dataSpec("master", o.args)))
	replica := StartReplica(t, master, opts...)
	deadline := time.Now().Add(sentinelTimeout)

	sn := &Sentinel{Master: master, Replica: replica, MasterName: SentinelMasterName, t: t}
	spec := serverSpec{
		kind: sentinelKind,
		args: func(s *Server, _ int) []string {
			return []string{filepath.Join(s.dir, sentinelConfigFile), "--sentinel"}
		},
		prepare: func(s *Server, port int) error {
			tlsPort := 0
			if o.tls != nil && o.tls.sentinels {
				var err error
				if tlsPort, err = freePort(); err != nil {
					return err
				}
				sn.mu.Lock()
				if sn.tlsPorts == nil {
					sn.tlsPorts = map[*Server]int{}
				}
				sn.tlsPorts[s] = tlsPort
				sn.mu.Unlock()
			}
			return writeSentinelConfig(s, port, master.Port(), o.tls, tlsPort)
		},
		pickPort: freePort,
	}
	for range numSentinels {
		sn.Sentinels = append(sn.Sentinels, startServer(t, spec))
	}
	if err := pollUntil(deadline, sn.problem); err != nil {
		t.Fatalf("redistest: sentinels not ready after %v: %v\n%s", sentinelTimeout, err,
			logTails(slices.Concat([]*Server{master, replica}, sn.Sentinels)))
	}
	return sn
}

// SentinelAddrs returns the sentinels' addresses, for a sentinel client.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// SentinelTLSAddrs returns the addresses where the sentinels take TLS
// connections, with WithTLSSentinels (nil without): beside their plain
// port, for clients that dial sentinels with TLS.
func (s *Sentinel) SentinelTLSAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tlsPorts == nil {
		return nil
	}
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = net.JoinHostPort(loopback, strconv.Itoa(s.tlsPorts[sn]))
	}
	return addrs
}

// announcedPort is the port a sentinel gives the others: its TLS port
// with WithTLSSentinels.
func (s *Sentinel) announcedPort(sn *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.tlsPorts[sn]; ok {
		return p
	}
	return sn.Port()
}

// CurrentMaster returns the master's address ("127.0.0.1:PORT") according to
// the first running sentinel that answers SENTINEL get-master-addr-by-name
// within a second. During a failover sentinels may briefly disagree. It is
// safe for concurrent use.
func (s *Sentinel) CurrentMaster() (string, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		if !sn.running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryLimit)
		v, err := sn.DoValue(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		addr, ok := v.([]any)
		if !ok || len(addr) != 2 {
			errs = append(errs, fmt.Errorf("redistest: sentinel %s: get-master-addr-by-name replied %v", sn.Addr(), v))
			continue
		}
		return net.JoinHostPort(formatReply(addr[0]), formatReply(addr[1])), nil
	}
	if len(errs) == 0 {
		return "", errors.New("redistest: no sentinel is running")
	}
	return "", errors.Join(errs...)
}

// problem reports what a sentinel does not know yet, or nil when every
// sentinel sees the master up, the replica with its link ok and the other
// sentinels.
func (s *Sentinel) problem() error {
	ports := make([]int, 0, len(s.Sentinels))
	for _, sn := range s.Sentinels {
		ports = append(ports, s.announcedPort(sn))
	}
	for _, sn := range s.Sentinels {
		ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryLimit)
		err := s.sentinelProblem(ctx, sn, ports)
		cancel()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
	}
	return nil
}

func (s *Sentinel) sentinelProblem(ctx context.Context, sn *Server, sentinelPorts []int) error {
	v, err := sn.DoValue(ctx, "SENTINEL", "MASTER", s.MasterName)
	if err != nil {
		return err
	}
	m, err := pairsToMap(v)
	if err != nil {
		return err
	}
	if err := wantFields(m, map[string]string{
		"ip":                  loopback,
		"port":                strconv.Itoa(s.Master.Port()),
		"flags":               "master",
		"num-slaves":          "1",
		"num-other-sentinels": strconv.Itoa(numSentinels - 1),
	}); err != nil {
		return fmt.Errorf("master: %w", err)
	}

	replicas, err := sentinelList(ctx, sn, "REPLICAS", s.MasterName)
	if err != nil {
		return err
	}
	if len(replicas) != 1 {
		return fmt.Errorf("knows %d replicas, want 1", len(replicas))
	}
	if err := wantFields(replicas[0], map[string]string{
		"ip":                 loopback,
		"port":               strconv.Itoa(s.Replica.Port()),
		"flags":              "slave",
		"master-link-status": "ok",
	}); err != nil {
		return fmt.Errorf("replica: %w", err)
	}

	others, err := sentinelList(ctx, sn, "SENTINELS", s.MasterName)
	if err != nil {
		return err
	}
	if len(others) != numSentinels-1 {
		return fmt.Errorf("knows %d other sentinels, want %d", len(others), numSentinels-1)
	}
	for _, o := range others {
		port, _ := strconv.Atoi(o["port"])
		if o["ip"] != loopback || o["flags"] != "sentinel" || port == s.announcedPort(sn) || !slices.Contains(sentinelPorts, port) {
			return fmt.Errorf("unexpected sentinel %s:%s flags %q", o["ip"], o["port"], o["flags"])
		}
	}
	return nil
}

// sentinelList runs SENTINEL <sub> <name>, which replies a list of field/value
// arrays.
func sentinelList(ctx context.Context, sn *Server, sub, name string) ([]map[string]string, error) {
	v, err := sn.DoValue(ctx, "SENTINEL", sub, name)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok && v != nil {
		return nil, fmt.Errorf("SENTINEL %s replied %T", sub, v)
	}
	list := make([]map[string]string, 0, len(arr))
	for _, e := range arr {
		m, err := pairsToMap(e)
		if err != nil {
			return nil, fmt.Errorf("SENTINEL %s: %w", sub, err)
		}
		list = append(list, m)
	}
	return list, nil
}

func wantFields(got, want map[string]string) error {
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s is %q, want %q", k, got[k], v)
		}
	}
	return nil
}

// replicaInSync reports whether the replica's link to the master is up and
// the master sees it online.
func replicaInSync(master, replica *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), sentinelQueryLimit)
	defer cancel()
	info, err := replica.DoContext(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	if st, _ := infoField(info, "master_link_status"); st != "up" {
		return fmt.Errorf("replica master_link_status:%s", st)
	}
	info, err = master.DoContext(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	if n, _ := infoField(info, "connected_slaves"); n != "1" {
		return fmt.Errorf("master connected_slaves:%s", n)
	}
	if s0, _ := infoField(info, "slave0"); !strings.Contains(s0, "state=online") {
		return fmt.Errorf("master slave0:%s", s0)
	}
	return nil
}

// writeSentinelConfig writes a sentinel's configuration, which the sentinel
// rewrites as it learns (hence a file of its own, writable).
func writeSentinelConfig(s *Server, port, masterPort int, tls *tlsOptions, tlsPort int) error {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("port %d", port)
	line("bind %s", loopback)
	line("daemonize no")
	line("dir %s", quoteConfig(s.dir))
	line("logfile %s", quoteConfig(s.logPath))
	line("sentinel announce-ip %s", loopback)
	if serverVersion(s.bin).atLeast(6, 2) {
		line("sentinel resolve-hostnames no")
		line("sentinel announce-hostnames no")
	}
	if tls != nil {
		// The sentinel reaches the data nodes (and, when they announce
		// their TLS ports, the other sentinels) over TLS, with the
		// server's certificate as its client one.
		if tlsPort > 0 {
			line("tls-port %d", tlsPort)
		}
		line("tls-replication yes")
		line("tls-cert-file %s", quoteConfig(tls.cert))
		line("tls-key-file %s", quoteConfig(tls.key))
		line("tls-ca-cert-file %s", quoteConfig(tls.ca))
	}
	line("sentinel monitor %s %s %d %d", SentinelMasterName, loopback, masterPort, SentinelQuorum)
	line("sentinel down-after-milliseconds %s %d", SentinelMasterName, SentinelDownAfter.Milliseconds())
	line("sentinel failover-timeout %s %d", SentinelMasterName, SentinelFailoverTimeout.Milliseconds())
	line("sentinel parallel-syncs %s 1", SentinelMasterName)
	return os.WriteFile(filepath.Join(s.dir, sentinelConfigFile), []byte(b.String()), 0o600)
}

// quoteConfig quotes a value for a Redis configuration file.
func quoteConfig(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// pollUntil calls check until it returns nil or the deadline passes, and then
// returns its last error.
func pollUntil(deadline time.Time, check func() error) error {
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(sentinelPoll)
	}
}

// Package redistest starts real Redis processes for integration and fault
// tests: a single server, a Redis Cluster made with `redis-cli --cluster
// create`, or a master, a replica and three sentinels.
//
// Every process listens on a free port of 127.0.0.1 only, runs in a
// directory from t.TempDir with persistence off, and is killed (SIGKILL to
// its process group, then waited for) in t.Cleanup. On Linux each process
// also gets SIGKILL when the test binary dies, so a panic or a -timeout
// does not leave servers behind.
//
// A test asks for a server and talks to it through its address:
//
//	func TestStore(t *testing.T) {
//		srv := redistest.Start(t)
//		client := newClient(srv.Addr()) // "127.0.0.1:PORT"
//		...
//		srv.Kill()    // a crash
//		srv.Restart() // same port, empty data set
//	}
//
// When redis-server is not on PATH, Start, StartCluster and StartSentinel
// skip the test with a message saying what to install, except when the
// environment variable LIMITKIT_REQUIRE_REDIS=1 (set by CI), where they fail
// it. Require does that check alone.
//
// Server.Do runs one control command (CONFIG SET, SCRIPT FLUSH, INFO,
// DEBUG SLEEP, ...) over a fresh connection with a small built-in RESP
// client; it is not meant as the client under test.
//
// Helpers that can fail the test (Start, Restart, Pause, Cluster.MasterOf,
// ...) call t.Fatalf, with the tail of the server's log, so they must be
// called from the goroutine running the test that started the server. Do, DoContext, DoValue and
// Sentinel.CurrentMaster return errors instead and are safe for concurrent
// use. Every wait is bounded in time.
package redistest

package redistest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that turns a missing Redis binary
// from a skipped test into a failed one. CI sets it to 1.
const RequireEnv = "LIMITKIT_REQUIRE_REDIS"

// defaultBinaries are the binaries Require checks when given none.
var defaultBinaries = []string{"redis-server", "redis-cli"}

// Require checks that each named binary is on PATH (by default redis-server
// and redis-cli). When one is missing it skips the test with a message
// naming what to install, or fails it when LIMITKIT_REQUIRE_REDIS=1.
//
// Start, StartCluster and StartSentinel call Require themselves; call it
// directly only to skip before doing other expensive setup.
func Require(t testing.TB, binaries ...string) {
	t.Helper()
	if len(binaries) == 0 {
		binaries = defaultBinaries
	}
	var missing []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "redistest: " + strings.Join(missing, ", ") + " not found on PATH " +
		"(on Debian/Ubuntu: apt-get install redis-server redis-tools)"
	if requireRedis() {
		t.Fatalf("%s; failing because %s=1", msg, RequireEnv)
	}
	t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, RequireEnv)
}

// requireRedis reports whether RequireEnv is set to a true value ("1").
func requireRedis() bool {
	v, err := strconv.ParseBool(os.Getenv(RequireEnv))
	return err == nil && v
}

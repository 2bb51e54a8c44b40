package main

import (
	"os"
	"testing"
)

// runAsBinaryEnv makes the test binary run main, as limitkit-rls would:
// the process tests (TestSIGTERMDrains) exec the test binary itself with
// it set, rather than building the command apart, which cost a whole
// second build of the module and its dependencies (most of 46 s on a
// clean cache). The binary runs the same main, under the race detector
// when the tests do. The name is outside LIMITKIT_ so that the start
// does not warn about it.
const runAsBinaryEnv = "RLS_TEST_RUN_MAIN"

// TestMain runs main instead of the tests when runAsBinaryEnv is 1.
func TestMain(m *testing.M) {
	if os.Getenv(runAsBinaryEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// settleFile puts window before limit, so that the file cut after "limit:
// 10" still parses: the half-written file of the issue.
const settleFile = "backend: {url: 'memory://'}\npolicies:\n  a:\n    window: 1m\n    limit: 1000\n"

// TestReloadFileWaitsForAHalfWrittenFile: a file being written (its first
// part in place, the rest written while ReloadFile waits) is applied only
// once whole, so the limit stays 1000 and never becomes 10. On the code
// before the fix, ReloadFile applied the half file: limit 10.
func TestReloadFileWaitsForAHalfWrittenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	require.NoError(t, os.WriteFile(path, []byte(settleFile), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	set, err := cfg.Build(context.Background())
	require.NoError(t, err)
	defer set.Close()

	half := settleFile[:len(settleFile)-len("00\n")]
	_, err = Parse([]byte(half), YAML)
	require.NoError(t, err, "the half file parses: the test would be vacuous otherwise")
	require.NoError(t, os.WriteFile(path, []byte(half), 0o600))
	reads := 0
	restore := settle
	defer func() { settle = restore }()
	settle = func() {
		if reads++; reads == 1 { // the writer finishes while ReloadFile waits
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString("00\n")
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
	}
	require.NoError(t, set.ReloadFile(path))
	require.Equal(t, int64(1000), set.Limiter("a").Config().Limit)
	require.Equal(t, 2, reads, "read until two reads agreed")
}

// TestReloadFileGivesUpOnAFileThatKeepsChanging: a file that differs at
// every read is never applied, and the error says to rename it into place.
func TestReloadFileGivesUpOnAFileThatKeepsChanging(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	require.NoError(t, os.WriteFile(path, []byte(settleFile), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	set, err := cfg.Build(context.Background())
	require.NoError(t, err)
	defer set.Close()

	restore := settle
	defer func() { settle = restore }()
	n := 0
	settle = func() {
		n++
		require.NoError(t, os.WriteFile(path, []byte(settleFile[:len(settleFile)-3]+string(rune('1'+n%9))+"0\n"), 0o600))
	}
	err = set.ReloadFile(path)
	require.ErrorContains(t, err, "the file kept changing over 20 reads 50ms apart; nothing was reloaded: write the new file beside it and rename it into place")
	require.Equal(t, MaxSettleReads-1, n)
	require.Equal(t, int64(1000), set.Limiter("a").Config().Limit)
}

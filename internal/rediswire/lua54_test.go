package rediswire

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// lua54Missing matches the calls of functions Lua 5.1 has and Lua 5.4
// does not (Dragonfly and other Lua 5.4 servers run the scripts there).
var lua54Missing = regexp.MustCompile(`(^|[^\w.:])(unpack|setfenv|getfenv|loadstring|module|gcinfo)\s*\(|` +
	`\btable\.(getn|setn|maxn)\b|\bmath\.(pow|mod|ldexp|frexp|cosh|sinh|tanh|log10)\b|\bstring\.gfind\b`)

// localUnpack declares a local unpack (the prelude's, or struct.unpack's).
var localUnpack = regexp.MustCompile(`local [\w, ]*\bunpack\b[\w, ]* =`)

// lua54Problems returns the uses in src of functions missing from Lua 5.4:
// a bare unpack counts only when no local unpack is declared before it.
func lua54Problems(src string) []string {
	var out []string
	lines := strings.Split(src, "\n")
	declared := false
	for i, line := range lines {
		if c := strings.Index(line, "--"); c >= 0 {
			line = line[:c]
		}
		if localUnpack.MatchString(line) {
			declared = true
		}
		for _, m := range lua54Missing.FindAllStringSubmatch(line, -1) {
			if m[2] == "unpack" && declared {
				continue
			}
			out = append(out, strings.TrimSpace(lines[i]))
		}
	}
	return out
}

// allScripts returns every script the stores send, by name.
func allScripts(t *testing.T) map[string]string {
	out := map[string]string{"multi": MultiScript(), "batch": BatchScript(), "peek batch": PeekBatchScript(), "groups": GroupsScript()}
	for _, name := range algorithms.Names() {
		src, err := Script(name)
		require.NoError(t, err)
		out[string(name)] = src
	}
	return out
}

// TestScriptsRunOnLua54: no script calls a function Lua 5.4 removed
// (concurrency.lua and sliding_log.lua called the global unpack). The
// control removes the prelude's local unpack: the check then finds them.
func TestScriptsRunOnLua54(t *testing.T) {
	const decl = "local unpack = table.unpack or unpack"
	found := 0
	for name, src := range allScripts(t) {
		require.Empty(t, lua54Problems(src), "%s calls functions Lua 5.4 has not", name)
		if strings.Contains(src, decl) {
			found += len(lua54Problems(strings.Replace(src, decl, "", 1)))
		}
	}
	require.Positive(t, found, "the control found no bare unpack: the check cannot tell")
	require.NotEmpty(t, lua54Problems("x = table.getn(t)\ny = math.pow(2, 3)"), "the check misses removed functions")
}

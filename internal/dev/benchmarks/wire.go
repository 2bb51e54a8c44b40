package benchmarks

// This file is the harness's only use of limitkit's Redis wire format (the
// scripts, their ARGV and the key layout), which is not public API. It lives
// in limitkit/internal/rediswire, which this nested module may import:
// its path is under limitkit/internal.

import (
	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// scriptSource returns the Lua source of alg's single-request script.
func scriptSource(alg algorithms.Name) (string, error) {
	return rediswire.Script(alg)
}

// keySuffix returns what limitkit appends to prefix + "{" + id + "}" to make
// the Redis key of a rule.
func keySuffix(rule algorithms.Rule) string {
	return rule.KeySuffix()
}

// takeArgs returns the ARGV of one take of cost 1 at now (ms).
func takeArgs(rule algorithms.Rule, now int64) ([]string, error) {
	return rediswire.Args(rule, now, 1, rediswire.ModeTake)
}

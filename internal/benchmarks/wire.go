package benchmarks

// This file is the harness's only use of limitkit's Redis wire format (the
// scripts, their ARGV and the key layout), which is not public API. When it
// moves (e.g. into limitkit/internal/redisscript, importable from this
// nested module), only this file changes.

import (
	"fmt"
	"reflect"

	"github.com/limitkit/limitkit/algorithms"
)

// scriptSource returns the Lua source of alg's single-request script.
func scriptSource(alg algorithms.Name) (string, error) {
	return algorithms.LuaScript(alg)
}

// keySuffix returns what limitkit appends to prefix + "{" + id + "}" to make
// the Redis key of a rule.
func keySuffix(rule algorithms.Rule) string {
	return rule.KeySuffix()
}

// takeArgs returns the ARGV of one take of cost 1 at now (ms). It calls
// Rule.LuaArgs by reflection so that it builds whether LuaArgs' third
// parameter is a bool (take) or a mode, and picks the mode that yields the
// take flag "1".
func takeArgs(rule algorithms.Rule, now int64) ([]string, error) {
	m := reflect.ValueOf(rule).MethodByName("LuaArgs")
	if !m.IsValid() || m.Type().NumIn() != 3 {
		return nil, fmt.Errorf("algorithms.Rule.LuaArgs has an unexpected signature")
	}
	pt := m.Type().In(2)
	var candidates []reflect.Value
	if pt.Kind() == reflect.Bool {
		candidates = []reflect.Value{reflect.ValueOf(true)}
	} else {
		for i := range 4 {
			candidates = append(candidates, reflect.ValueOf(i).Convert(pt))
		}
	}
	for _, c := range candidates {
		out := m.Call([]reflect.Value{reflect.ValueOf(now), reflect.ValueOf(int64(1)), c})[0].Interface().([]string)
		if len(out) > 0 && out[len(out)-1] == "1" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("no LuaArgs mode gives a take")
}

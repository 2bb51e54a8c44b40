package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/limitkit/limitkit/algorithms"
)

// uncovered lists what the suite, whose case names are names, fails to
// replay for a given its descriptor: its Examples, every generic case, and
// the change tables its Accuracy calls for (the exact log's for an Exact
// rate algorithm, its own Changes for a NeverOver one, the rolling reload
// for both). It also names a table of a's Changes the suite has no case
// for, which would never run.
func uncovered(a *algorithms.Algorithm, names []string) []string {
	var out []string
	want := func(c string) {
		if !slices.Contains(names, c+"/"+string(a.Name)) {
			out = append(out, c+"/"+string(a.Name))
		}
	}
	if len(a.Examples.Steps) == 0 {
		out = append(out, "table/"+string(a.Name)+" (no Examples)")
	}
	want("table")
	for _, g := range genericCases() {
		want(g.name)
	}
	if exactRate(a) || (a.Accuracy == algorithms.NeverOver && !a.HoldsLeases()) {
		// A NeverOver algorithm's decisions across changes are its own:
		// it must state them.
		for _, t := range changeTables {
			want(t.name)
		}
	}
	if neverOver(a) {
		want("rolling_reload")
	}
	for name := range a.Changes {
		if !slices.ContainsFunc(changeTables, func(t namedSteps) bool { return t.name == name }) {
			out = append(out, fmt.Sprintf("Changes[%q] (no such case)", name))
		}
	}
	slices.Sort(out)
	return out
}

// TestSuiteCoversEveryAlgorithm walks the registry: every algorithm's row
// brings its cases into the suite, as its Accuracy calls for.
func TestSuiteCoversEveryAlgorithm(t *testing.T) {
	names := CaseNames()
	for _, a := range algorithms.Algorithms() {
		if miss := uncovered(a, names); len(miss) > 0 {
			t.Errorf("%s (%v): the suite does not replay %q", a.Name, a.Accuracy, miss)
		}
	}
}

// TestUncoveredCatchesAGap is the control: rows the suite cannot cover
// (never registered, so the suite has no case for them) are reported, as
// is a two_level whose change tables were dropped or misnamed.
func TestUncoveredCatchesAGap(t *testing.T) {
	names := CaseNames()
	for _, acc := range []algorithms.Accuracy{algorithms.Exact, algorithms.NeverOver, algorithms.PerAlignedWindow, algorithms.Approximate} {
		leaky := *algorithms.Lookup(algorithms.GCRA)
		leaky.Name, leaky.Accuracy = "leaky_bucket", acc
		if miss := uncovered(&leaky, names); !slices.Contains(miss, "table/leaky_bucket") {
			t.Errorf("an unregistered %v algorithm: reported %q, want its table among them", acc, miss)
		}
	}
	tl := *algorithms.Lookup(algorithms.TwoLevel)
	tl.Changes = map[string][]algorithms.Example{"limit_changes": tl.Changes["limit_change"]}
	miss := uncovered(&tl, caseNamesWith(tl.Changes))
	for _, want := range []string{`Changes["limit_changes"] (no such case)`, "late_after_gap/two_level", "window_shortened/two_level"} {
		if !slices.Contains(miss, want) {
			t.Errorf("two_level without its change tables: reported %q, want %q among them", miss, want)
		}
	}
}

// caseNamesWith is the suite's case names with two_level's change tables
// replaced by those of changes (the control's two_level).
func caseNamesWith(changes map[string][]algorithms.Example) []string {
	var out []string
	for _, n := range CaseNames() {
		keep := true
		for _, t := range changeTables {
			if n == t.name+"/"+string(algorithms.TwoLevel) {
				_, keep = changes[t.name]
			}
		}
		if keep {
			out = append(out, n)
		}
	}
	return out
}

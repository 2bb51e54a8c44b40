package algtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/algorithms/internal/registryhook"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/docscheck"
	"github.com/limitkit/limitkit/internal/dev/modeltest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// twin is a new algorithm that decides as fixed_window does: its Go steps,
// Lua body and promise (Accuracy) are fixed_window's, under a name, key
// suffix and salt of its own. broken is the same with Go steps that admit one unit too many; the
// suites must catch it (the control).
var twin, broken algorithms.Algorithm

func init() {
	fw := algorithms.Lookup(algorithms.FixedWindow)
	twin = *fw
	twin.Name, twin.Suffix, twin.Salt = "test_twin", ":tt", 0x0123456789abcdef
	broken = *fw
	broken.Name, broken.Suffix, broken.Salt = "test_broken", ":tb", 0xfedcba9876543210
	broken.Take = func(s *algorithms.State, now, w, limit, cost int64) algorithms.Outcome {
		return fw.Take(s, now, w, limit+1, cost)
	}
	broken.Peek = func(s *algorithms.State, now, w, limit, cost int64) algorithms.Outcome {
		return fw.Peek(s, now, w, limit+1, cost)
	}
	for _, a := range []*algorithms.Algorithm{&twin, &broken} {
		if err := registryhook.Register(a); err != nil {
			panic(err)
		}
	}
}

func TestRegisterRejectsClashes(t *testing.T) {
	dup := twin
	require.ErrorIs(t, registryhook.Register(&dup), algorithms.ErrInvalidRule)
	dup.Name, dup.Suffix, dup.Salt = "test_other", ":to", 1
	dup.Take = nil
	require.ErrorIs(t, registryhook.Register(&dup), algorithms.ErrInvalidRule)
	dup.Take = twin.Take
	dup.Accuracy = 0
	require.ErrorIs(t, registryhook.Register(&dup), algorithms.ErrInvalidRule, "a row must state its Accuracy")
	require.ErrorIs(t, registryhook.Register(dup), algorithms.ErrInvalidRule, "not a pointer")
	require.Nil(t, algorithms.Lookup("test_other"))
}

// failedCases returns the names of the cases of alg that failed.
func failedCases(failures []storetest.Failure, alg algorithms.Name) []string {
	var out []string
	for _, f := range failures {
		if strings.HasSuffix(f.Case, "/"+string(alg)) && !slices.Contains(out, f.Case) {
			out = append(out, f.Case)
		}
	}
	return out
}

func TestConformanceSuitePicksItUp(t *testing.T) {
	names := storetest.CaseNames()
	for _, alg := range []algorithms.Name{twin.Name, broken.Name} {
		require.Contains(t, names, "table/"+string(alg))
		require.Contains(t, names, "expiry/"+string(alg))
	}
	s, err := memorystore.New()
	require.NoError(t, err)
	// independent_keys takes on one key under every registered algorithm,
	// the broken one included, so it fails for all; every other case of
	// the twin must pass.
	var failures []storetest.Failure
	for _, f := range storetest.Check(t.Context(), s) {
		if !strings.HasPrefix(f.Case, "independent_keys/") {
			failures = append(failures, f)
		}
	}
	require.Empty(t, failedCases(failures, twin.Name), "%v", failures)
	// Control: the suite catches the broken one, in its table among others.
	require.Contains(t, failedCases(failures, broken.Name), "table/"+string(broken.Name))
	// (The cases that loop over every algorithm, give_back/*, name it in
	// their message.)
	for _, f := range failures {
		require.True(t, strings.HasSuffix(f.Case, "/"+string(broken.Name)) || strings.Contains(f.Message, string(broken.Name)),
			"unexpected failure: %+v", f)
	}
}

// recorder collects a differential run's failures.
type recorder struct{ msgs []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func TestDifferentialPicksItUp(t *testing.T) {
	for _, alg := range []algorithms.Name{twin.Name, broken.Name} {
		src, err := rediswire.Script(alg)
		require.NoError(t, err)
		require.Contains(t, src, twin.Lua)
		require.Contains(t, rediswire.BatchScript(), "STEPS['"+string(alg)+"']")
		require.Contains(t, rediswire.MultiScript(), "STEPS['"+string(alg)+"']")
	}
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	s, err := goredisstore.New(client)
	require.NoError(t, err)
	var good, bad recorder
	scripttest.DifferentialOf(context.Background(), &good, s, 1, 300, []algorithms.Name{twin.Name})
	require.Empty(t, good.msgs)
	// Control: Go steps that differ from the Lua body are caught.
	scripttest.DifferentialOf(context.Background(), &bad, s, 1, 300, []algorithms.Name{broken.Name})
	require.NotEmpty(t, bad.msgs)
}

// TestModelPicksItUp drives the new rows through the model test, whose
// check follows the row's Accuracy (the twin's is fixed_window's,
// PerAlignedWindow): the twin passes, and the broken one is caught.
func TestModelPicksItUp(t *testing.T) {
	for _, a := range []*algorithms.Algorithm{&twin, &broken} {
		require.NoError(t, modeltest.Covers(a), a.Name)
	}
	s, err := memorystore.New()
	require.NoError(t, err)
	for seed := range uint64(3) {
		require.NoError(t, modeltest.Drive(t.Context(), s, twin.Name, fmt.Sprint("model:twin:", seed, ":"), seed, 600))
		// Control: Go steps that admit one unit too many.
		err := modeltest.Drive(t.Context(), s, broken.Name, fmt.Sprint("model:broken:", seed, ":"), seed, 600)
		require.ErrorContains(t, err, "the model says")
		if seed == 0 {
			t.Logf("caught: %.200v", err)
		}
	}
}

func TestDocsCheckPicksItUp(t *testing.T) {
	missing, err := docscheck.Missing("../../..", algorithms.Names())
	require.NoError(t, err)
	for _, doc := range []string{docscheck.LimiterDoc, docscheck.ConfigAlgorithm, docscheck.AlgorithmsDoc, docscheck.ReadmeTable} {
		require.Equal(t, []algorithms.Name{twin.Name, broken.Name}, missing[doc], doc)
	}
}

package docscheck

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// The module root, from this package.
const root = "../../.."

func TestDocsNameEveryAlgorithm(t *testing.T) {
	missing, err := Missing(root, algorithms.Names())
	require.NoError(t, err)
	require.Empty(t, missing, "the docs must name every registered algorithm")
}

func TestMissingCatchesAnUndocumentedName(t *testing.T) {
	// Control: a name no document mentions is reported by all four.
	missing, err := Missing(root, append(algorithms.Names(), "leaky_bucket"))
	require.NoError(t, err)
	want := map[string][]algorithms.Name{}
	for _, doc := range []string{LimiterDoc, ConfigAlgorithm, AlgorithmsDoc, ReadmeTable} {
		want[doc] = []algorithms.Name{"leaky_bucket"}
	}
	require.Equal(t, want, missing)
}

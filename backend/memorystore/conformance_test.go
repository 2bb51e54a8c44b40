package memorystore_test

import (
	"testing"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	storetest.Run(t, s)
}

func TestConformanceSmallStore(t *testing.T) {
	// A single-shard store conforms too, while the suite's keys fit in it.
	s, err := memorystore.New(memorystore.WithMaxKeys(1000))
	require.NoError(t, err)
	storetest.Run(t, s)
}

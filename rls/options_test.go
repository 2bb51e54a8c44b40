package rls

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
)

// TestNewRefusesBadOptions: each refused option is named in New's error,
// after a valid option; a nil option is skipped.
func TestNewRefusesBadOptions(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	for name, opt := range map[string]Option{
		"WithFailurePolicy":  WithFailurePolicy(backend.FailurePolicy{}),
		"WithClock":          WithClock(nil),
		"WithMaxStatKeys":    WithMaxStatKeys(-1),
		"WithNearLimitRatio": WithNearLimitRatio(1.5),
		"WithKeyPrefix":      WithKeyPrefix("a{b"),
	} {
		_, err := New(store, nil, WithShadowMode(true), opt)
		require.ErrorContains(t, err, "rls: "+name+": ", name)
	}
	_, err = New(store, nil, nil, WithShadowMode(true))
	require.NoError(t, err, "a nil option is ignored")
}

package stores

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBadInput(t *testing.T) {
	_, _, err := Redis("redis://127.0.0.1:1/0", "jedis")
	require.ErrorContains(t, err, `unknown client "jedis"`)
	for _, client := range []string{"go-redis", "rueidis"} {
		_, _, err := Redis("http://127.0.0.1/", client)
		require.Error(t, err, client)
	}
}

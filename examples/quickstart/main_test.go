package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuickstartOutput(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out))
	text := out.String()
	for _, want := range []string{
		"t=2.5s  request 6: denied, retry in 7.5s",
		"t=2.5s  request 6: denied, retry in 9.501s",
		"sliding_log      admitted  5 of 10",
		"sliding_counter  admitted  5 of 10",
		"fixed_window     admitted 10 of 10",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, 3, strings.Count(text, "after the RetryAfter of request 7: allowed"))
}

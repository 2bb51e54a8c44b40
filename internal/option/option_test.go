package option

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

type opts struct{ seen []int }

type opt func(*opts) error

func record(n int) opt { return func(o *opts) error { o.seen = append(o.seen, n); return nil } }

func TestApplyInOrderSkippingNil(t *testing.T) {
	var o opts
	require.NoError(t, Apply(&o, []opt{record(1), nil, record(2), record(3)}))
	require.Equal(t, []int{1, 2, 3}, o.seen)
}

func TestApplyStopsAtFirstError(t *testing.T) {
	bad := errors.New("WithX: bad")
	var o opts
	err := Apply(&o, []opt{record(1), func(*opts) error { return bad }, record(3)})
	require.ErrorIs(t, err, bad)
	require.Equal(t, []int{1}, o.seen, "options after the failing one are not applied")
}

package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// TestJudgeArrival: the judge sees a late request's wrongful denial, an
// admission over the limit, and which requests came late.
func TestJudgeArrival(t *testing.T) {
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: 100 * time.Millisecond}
	got := judgeArrival([]stamped{
		{key: 1, cost: 1, at: 10, done: 1, allowed: true},
		{key: 1, cost: 1, at: 20, done: 2, allowed: true},
		// Stamped first, decided last: nothing was admitted before it.
		{key: 1, cost: 1, at: 5, done: 3, allowed: false},
		// A third unit inside (−70, 30]: over the limit of 2.
		{key: 1, cost: 1, at: 30, done: 4, allowed: true},
		// Another key, in order and within its limit.
		{key: 2, cost: 2, at: 0, done: 5, allowed: true},
		{key: 2, cost: 1, at: 50, done: 6, allowed: false},
	}, rule)
	require.Equal(t, arrivalResult{requests: 6, late: 1, wronglyDenied: 1, wronglyAllowed: 1, worst: 3}, got)
}

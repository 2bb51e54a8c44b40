// Package suggest finds the valid name nearest to a misspelt one, so that
// every error about a name (a config field, a URL option) suggests alike.
package suggest

import (
	"fmt"
	"strings"
)

// DidYouMean returns ` (did you mean "x"?)` for the option nearest to got
// (see Nearest), or "" when none is near.
func DidYouMean(got string, options []string) string {
	if n := Nearest(got, options); n != "" {
		return fmt.Sprintf(" (did you mean %q?)", n)
	}
	return ""
}

// Nearest returns the option nearest to got, or "" when none is near:
// within a third of got's length in edits, or got being the start of the
// other (at least 3 letters).
func Nearest(got string, options []string) string {
	g := strings.ToLower(got)
	if g == "" || len(g) > 64 {
		return ""
	}
	best, bestD := "", 0
	for _, o := range options {
		lo := strings.ToLower(o)
		if lo == g {
			return o
		}
		d := distance(g, lo)
		if len(g) >= 3 && strings.HasPrefix(lo, g) {
			d = min(d, 1)
		}
		if best == "" || d < bestD {
			best, bestD = o, d
		}
	}
	if bestD > max(1, len(g)/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b, counting a swap of two
// neighbouring letters as one edit.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

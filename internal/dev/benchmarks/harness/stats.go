package harness

import (
	"io"
	"slices"
	"strings"
)

// Median returns the median of vs (the mean of the middle two when their
// number is even), 0 for none. vs is left as it was.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Ratio is a ratio taken within one run: the median of per-round ratios of
// two cells measured in the same round (so sharing that round's machine),
// with their range.
type Ratio struct {
	Median, Min, Max float64
	// Rounds is the number of per-round ratios.
	Rounds int
	// OK is false when there is no round or a round's denominator is 0.
	OK bool
}

// RatioOf returns the ratio of a over b round by round: a[r] and b[r] are
// the two cells' values in round r.
func RatioOf(a, b []float64) Ratio {
	n := min(len(a), len(b))
	if n == 0 {
		return Ratio{}
	}
	rs := make([]float64, n)
	for r := range n {
		if b[r] == 0 {
			return Ratio{}
		}
		rs[r] = a[r] / b[r]
	}
	return Ratio{Median: Median(rs), Min: slices.Min(rs), Max: slices.Max(rs), Rounds: n, OK: true}
}

// WriteTable writes a markdown table. align holds one letter per column:
// 'r' aligns it right (numbers), anything else (or a column past align's
// end) leaves the default.
func WriteTable(w io.Writer, align string, header []string, rows [][]string) {
	var sep strings.Builder
	sep.WriteString("|")
	for i := range header {
		if i < len(align) && align[i] == 'r' {
			sep.WriteString("--:|")
		} else {
			sep.WriteString("---|")
		}
	}
	io.WriteString(w, "| "+strings.Join(header, " | ")+" |\n"+sep.String()+"\n")
	for _, r := range rows {
		io.WriteString(w, "| "+strings.Join(r, " | ")+" |\n")
	}
	io.WriteString(w, "\n")
}

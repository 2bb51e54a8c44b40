package boundid

import (
	"strconv"
	"strings"
	"testing"
)

func TestQuoteShortIsPercentQ(t *testing.T) {
	for _, id := range []string{"", "user:1", "a\"b\\c\n", "\xff\x00{}", strings.Repeat("x", MaxPrefix)} {
		if got, want := Quote(id), strconv.Quote(id); got != want {
			t.Errorf("Quote(%q) = %s, want %s", id, got, want)
		}
	}
}

func TestQuoteLongIsBounded(t *testing.T) {
	huge := strings.Repeat("\x00\"é", 1<<20/4)
	long := []string{
		strings.Repeat("a", MaxPrefix+1),
		strings.Repeat("a", 1<<20),
		huge,
		strings.Repeat("é", 1000), // a cut inside a rune moves back
	}
	for _, id := range long {
		got := Quote(id)
		if len(got) > 4*MaxPrefix+40 {
			t.Errorf("Quote of a %d-byte id is %d bytes: %.100s", len(id), len(got), got)
		}
		if !strings.Contains(got, strconv.Itoa(len(id))+" bytes") {
			t.Errorf("Quote(%.20q...) = %s: no length", id, got)
		}
		q, _, _ := strings.Cut(got, "…")
		s, err := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(id, s) || len(s) < MaxPrefix-3 {
			t.Errorf("Quote(%.20q...) = %s: prefix %q (%v) is not the id's start", id, got, s, err)
		}
	}
	// Same first 64 bytes, different ids: different quotes.
	a, b := strings.Repeat("a", 100)+"1", strings.Repeat("a", 100)+"2"
	if Quote(a) == Quote(b) {
		t.Errorf("two ids share a quote: %s", Quote(a))
	}
}

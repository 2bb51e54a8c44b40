// Package boundid writes caller-supplied ids (rate-limit keys) into error
// messages at a bounded size. Ids come from requests (user names, IP
// addresses, API keys) and can be huge or hostile; an error that copied one
// whole could be megabytes long and flood logs. Quote keeps the first
// MaxPrefix bytes, escaped, and a short digest of the whole id, so two long
// ids that share a prefix still read differently.
//
// It imports only the standard library, so every package (backend,
// limiter, fallback, the stores) can use it.
package boundid

import (
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxPrefix is how many bytes of an id Quote shows.
const MaxPrefix = 64

// Quote returns id as Go's %q would write it when it is at most MaxPrefix
// bytes long. A longer id becomes its first MaxPrefix bytes (cut at a rune
// boundary), quoted, followed by "…" and its length and the FNV-1a digest of
// the whole id in 8 hex digits: "abc"…(1048576 bytes, fnv 1a2b3c4d). The
// result is at most about 4*MaxPrefix+40 bytes whatever id is.
func Quote(id string) string {
	if len(id) <= MaxPrefix {
		return strconv.Quote(id)
	}
	cut := MaxPrefix
	for cut > MaxPrefix-utf8.UTFMax && !utf8.RuneStart(id[cut]) {
		cut--
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	var b strings.Builder
	b.WriteString(strconv.Quote(id[:cut]))
	b.WriteString("…(")
	b.WriteString(strconv.Itoa(len(id)))
	b.WriteString(" bytes, fnv ")
	sum := strconv.FormatUint(uint64(h.Sum32()), 16)
	b.WriteString(strings.Repeat("0", 8-len(sum)))
	b.WriteString(sum)
	b.WriteByte(')')
	return b.String()
}

package rediswire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func hostileIDs() []string {
	huge := strings.Repeat("a", 1<<20)
	digestLike := Build("", huge, "")
	return []string{
		"a", "A", "user:42", "{", "}", "{}", "}{", "{{}}", "a{b}c", "}a{", "{a}", "a}",
		"x}:sl", ":sl", "k}:sc", "ключ🔑", "\x00", "\x00\xff\xfe", " ", "\n", "",
		huge, huge + "b", huge[:1<<19] + "{}" + huge[:1<<19],
		strings.Repeat("b", MaxRawID), strings.Repeat("b", MaxRawID+1),
		"#", "#a", "##", digestLike[1 : len(digestLike)-1], // an id that is another's tag
		digestLike[2 : len(digestLike)-1], // the digest without its marker
	}
}

func TestHostileIDs(t *testing.T) {
	suffixes := []string{":sl", ":sc", ":fw"}
	seen := map[string]string{}
	for _, id := range hostileIDs() {
		slot := Slot(Build("p:", id, suffixes[0]))
		for _, suffix := range suffixes {
			key := Build("p:", id, suffix)
			require.LessOrEqual(t, len(key), len("p:")+MaxRawID+2+len(suffix), "id %.20q", id)
			require.Equal(t, slot, Slot(key), "id %.20q suffix %s", id, suffix)
			// The tag is exactly what sits between the first braces.
			open, end := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
			require.Equal(t, len("p:"), open)
			require.Equal(t, len(key)-len(suffix)-1, end, "id %.20q", id)
			require.Greater(t, end, open+1, "empty hash tag for id %.20q", id)
			prev, dup := seen[key]
			require.False(t, dup, "ids %.20q and %.20q share key %q", prev, id, key)
			seen[key] = id
		}
	}
	// Prefixes keep the same id apart.
	require.NotEqual(t, Build("a:", "x", ":sl"), Build("a:x", "", ":sl"))
	require.NotEqual(t, Build("a", ":x", ":sl"), Build("a:", "x", ":sl"))
}

func TestSafe(t *testing.T) {
	require.True(t, Safe("user:42"))
	require.True(t, Safe("ключ🔑"))
	require.Equal(t, "p{user:42}:sl", Build("p", "user:42", ":sl"))
	for _, id := range []string{"", "#x", "a{", "}", strings.Repeat("x", MaxRawID+1)} {
		require.False(t, Safe(id), "%q", id)
		key := Build("", id, "")
		require.Len(t, key, hashedLen+2)
		require.Equal(t, byte(HashMarker), key[1])
	}
}

func TestBuildAllocatesOnce(t *testing.T) {
	prefix, id := "api:login:", "user:42"
	allocs := testing.AllocsPerRun(100, func() { _ = Build(prefix, id, ":sl") })
	require.Equal(t, 1.0, allocs)
	long := strings.Repeat("z", 200)
	allocs = testing.AllocsPerRun(100, func() { _ = Build(prefix, long, ":sl") })
	require.LessOrEqual(t, allocs, 2.0)
}

func BenchmarkBuild(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Build("api:login:", "user:42", ":sl")
	}
}

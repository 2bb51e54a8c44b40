package yamltree

import (
	"testing"

	"github.com/limitkit/limitkit/limiter/configtree"
)

// FuzzParse: any bytes parse into a tree within the file limits or fail
// with a short error, without a panic (aliases, anchors and deep nesting
// included).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"policies:\n  - name: api\n    limit: 10\n    window: 1s\n",
		"a: &x [1, 2, {b: c}]\nd: *x\ne: [*x, *x]\n",
		"a: &a [*a]\n", "- - - - - - - - - []\n", "? [a, b]\n: c\n", "a: !!binary aGVsbG8=\n",
		"%YAML 1.2\n---\na: 1\n...\n---\nb: 2\n", "a: 'unterminated\n", "\t- x\n", "a: 0x1F\nb: .inf\nc: ~\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse(data, configtree.FileLimits)
		if err != nil && len(err.Error()) > 2048 {
			t.Fatalf("error of %d bytes for %d bytes of input: %.200s", len(err.Error()), len(data), err)
		}
	})
}

package configtree

import "testing"

// FuzzParseJSON: any bytes parse into a tree or fail with a short error
// (errors quote values shortened), without a panic; a tree that parses
// describes itself shortly too.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"policies": [{"name": "api", "limit": 10, "window": "1s"}]}`,
		`{"a": {"b": {"c": [1, 2.5, -3e9, true, null, "x"]}}}`,
		`[[[[[[[[[[]]]]]]]]]]`, `{"a": 1, "a": 2}`, `"\u0000\ud800"`, `{"a":`, `1e999999`, ` `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := ParseJSON(data)
		if err != nil {
			if len(err.Error()) > 2048 {
				t.Fatalf("error of %d bytes for %d bytes of input: %.200s", len(err.Error()), len(data), err)
			}
			return
		}
		if d := Describe(n); len(d) > 2048 {
			t.Fatalf("Describe of %d bytes", len(d))
		}
	})
}

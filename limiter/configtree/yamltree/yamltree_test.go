package yamltree

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/limitkit/limitkit/limiter/configtree"
)

// bomb is a file of levels anchors, each a list of ten aliases of the one
// before: its last alias stands for about 10^levels values.
func bomb(levels int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}

// TestAliasesCounted: an alias counts as the values it stands for, against
// either bound, and the file is refused at the line of the alias that
// passes it; the control, the same shape within the bound, is read with
// the aliased node shared, not copied.
func TestAliasesCounted(t *testing.T) {
	for _, lim := range []configtree.Limits{configtree.FileLimits, {MaxAliased: 1_000_000}} {
		_, err := Parse([]byte(bomb(10)), lim)
		var te *configtree.Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "YAML aliases expand to more than") || te.Line == 0 {
			t.Fatalf("%+v: %v; want the aliases refused at a line", lim, err)
		}
	}
	root, err := Parse([]byte(bomb(4)), configtree.Limits{MaxAliased: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	a2, a3 := root.Pairs[2].Val, root.Pairs[3].Val
	if len(a3.Items) != 10 || a3.Items[0] != a2 || a3.Items[9] != a2 {
		t.Fatalf("the aliases of a3 are not a2's node")
	}
	// Control: with no aliases the same values pass MaxAliased.
	plain := strings.Repeat("- x\n", 20_000)
	if _, err := Parse([]byte(plain), configtree.Limits{MaxAliased: 10}); err != nil {
		t.Fatalf("values without aliases: %v", err)
	}
	if _, err := Parse([]byte(plain), configtree.Limits{MaxValues: 10}); err == nil || !strings.Contains(err.Error(), "more than 10 values") {
		t.Fatalf("values past MaxValues: %v", err)
	}
}

// TestDepthThroughAliases: an alias nests its anchor's levels where it
// stands.
func TestDepthThroughAliases(t *testing.T) {
	lim := configtree.Limits{MaxDepth: 5}
	deep := "a: &a [[[1]]]\n" // a's value has 3 levels, at depth 2
	if _, err := Parse([]byte(deep), lim); err != nil {
		t.Fatalf("4 levels: %v", err)
	}
	_, err := Parse([]byte(deep+"b: [[*a]]\n"), lim) // *a at depth 4: 6 levels
	if err == nil || !strings.Contains(err.Error(), "nested more than 5 levels deep") {
		t.Fatalf("6 levels through an alias: %v", err)
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"", "the file is empty"},
		{"# only a comment\n", "the file is empty"},
		{"a: 1\n---\nb: 2\n", "a second YAML document"},
		{"a: &a [*a]\n", "alias *a is inside its own anchor"},
		{"base: &b {x: 1}\nc:\n  <<: *b\n", "merge keys (<<) are not supported"},
		{"? [a]\n: 1\n", "a mapping key must be a plain name"},
		{"a: [1\n", "not valid YAML"},
	} {
		_, err := Parse([]byte(c.yaml), configtree.FileLimits)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %q", c.yaml, err, c.want)
		}
	}
	_, err := Parse(nil, configtree.FileLimits)
	if !errors.Is(err, configtree.ErrEmpty) {
		t.Errorf("empty: %v does not wrap ErrEmpty", err)
	}
}

// TestScalars: each scalar keeps its type and line; a boolean reads the
// same however it is spelt; a key keeps its type.
func TestScalars(t *testing.T) {
	root, err := Parse([]byte("a: True\nb: FALSE\nc: 7\nd: 0.5\ne: ~\nf: text\n1: x\n"), configtree.FileLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		tag   configtree.Tag
		value string
	}{{configtree.BoolTag, "true"}, {configtree.BoolTag, "false"}, {configtree.IntTag, "7"}, {configtree.FloatTag, "0.5"},
		{configtree.NullTag, "~"}, {configtree.StrTag, "text"}, {configtree.StrTag, "x"}}
	for i, w := range want {
		p := root.Pairs[i]
		if p.Val.Tag != w.tag || p.Val.Value != w.value || p.Val.Line != i+1 || p.KeyLine != i+1 {
			t.Errorf("%s: %+v; want tag %d value %q on line %d", p.Key, *p.Val, w.tag, w.value, i+1)
		}
	}
	if root.Pairs[6].KeyTag != configtree.IntTag || root.Pairs[0].KeyTag != configtree.StrTag {
		t.Errorf("key tags %d %d; want int and str", root.Pairs[6].KeyTag, root.Pairs[0].KeyTag)
	}
}

// Package configtree is the project's one reader of configuration files:
// a tree of values that YAML (package yamltree) and JSON (ParseJSON) both
// read into, with the line of each, bounded against hostile documents
// (Limits), and a Decoder whose strict field checks, line-numbered errors
// and "did you mean" suggestions every field of limiter/config's files and
// of limiter.Config's JSON goes through. The rate limit service (module
// rls) reads its files into the same tree and walks it with the
// reference's messages.
//
// It is public because module rls, a module of its own, reads its files
// with it, and a module importing another module's internal package
// breaks when the two are built at different versions.
//
// Stability: this package serves limiter/config and rls. Before v1 its
// names, Limits' fields and the wording of its errors may change in any
// minor release; rls of the same version is kept in step. Read your own
// files with limiter/config rather than with this package.
package configtree

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// Limits bound a document's shape, counting an alias as the values it
// stands for: a few kilobytes of YAML anchors pointing at lists of anchors
// (an "alias bomb") stand for billions of values, and are refused before
// any walk costs memory or time. A zero field is no bound.
type Limits struct {
	// MaxValues bounds the values of the document, aliases expanded.
	MaxValues int
	// MaxAliased bounds the values reached through aliases (for a format
	// whose files are bounded by their size alone).
	MaxAliased int
	// MaxDepth bounds the nesting, through aliases.
	MaxDepth int
}

// FileLimits are the bounds of a limits file (limiter/config, and a
// limiter.Config in JSON): a few dozen values, nested a few levels.
var FileLimits = Limits{MaxValues: 100_000, MaxDepth: 64}

// ErrEmpty is the problem of a document with no value.
var ErrEmpty = errors.New("the file is empty")

// Kind is what a node holds.
type Kind uint8

// The kinds of node.
const (
	ScalarNode Kind = iota
	MapNode
	SeqNode
)

// Tag is the type of a scalar as its format wrote it.
type Tag uint8

// The scalar types.
const (
	StrTag Tag = iota
	IntTag
	FloatTag
	BoolTag
	NullTag
)

// Node is one value of a document, in a form shared by YAML and JSON, with
// the line it starts on. A tree is read-only once parsed: a YAML alias is
// the very node its anchor names, so nodes may be shared.
type Node struct {
	Kind  Kind
	Tag   Tag
	Line  int
	Value string  // a scalar's text
	Pairs []Pair  // a mapping's entries, in document order
	Items []*Node // a list's items, in order
}

// Pair is one entry of a mapping. Key is the key's text; KeyTag its type
// (YAML allows keys such as 1 or 0.25; JSON's are strings).
type Pair struct {
	Key     string
	KeyTag  Tag
	KeyLine int
	Val     *Node
}

// Error is what is wrong with a value, and where: limiter/config turns it
// into its *Error, limiter into "field: problem", rls into its
// *ConfigError.
type Error struct {
	// Line is the 1-based line of the value; 0 when unknown.
	Line int
	// Field is the dotted path of the field; empty for syntax errors.
	Field string
	// Err says what is wrong.
	Err error
}

// Error formats e as "field: problem".
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Budget counts the values of a tree as it is built, against Limits.
type Budget struct {
	Limits
	values, aliased int
}

// Value counts one value written at depth and line, and fails past the
// bounds.
func (b *Budget) Value(depth, line int) error {
	b.values++
	if b.MaxValues > 0 && b.values > b.MaxValues {
		return &Error{Line: line, Err: fmt.Errorf("more than %d values; a limits file is much smaller", b.MaxValues)}
	}
	if b.MaxDepth > 0 && depth > b.MaxDepth {
		return &Error{Line: line, Err: fmt.Errorf("nested more than %d levels deep", b.MaxDepth)}
	}
	return nil
}

// Alias counts an alias at depth and line that stands for size values,
// height levels deep, and fails past the bounds. size saturates (see
// SizeAdd), so it never wraps.
func (b *Budget) Alias(size, depth, height, line int) error {
	b.values = SizeAdd(b.values, size)
	b.aliased = SizeAdd(b.aliased, size)
	if (b.MaxValues > 0 && b.values > b.MaxValues) || (b.MaxAliased > 0 && b.aliased > b.MaxAliased) {
		most := b.MaxValues
		if most == 0 || (b.MaxAliased > 0 && b.aliased > b.MaxAliased) {
			most = b.MaxAliased
		}
		return &Error{Line: line, Err: fmt.Errorf("YAML aliases expand to more than %d values; write the values out, or reuse fewer anchors", most)}
	}
	if b.MaxDepth > 0 && depth+height > b.MaxDepth {
		return &Error{Line: line, Err: fmt.Errorf("nested more than %d levels deep (through aliases)", b.MaxDepth)}
	}
	return nil
}

// SizeAdd adds two counts of values, saturating far below overflow: the
// size of an aliased subtree grows exponentially with the anchors' nesting.
func SizeAdd(a, b int) int {
	const most = 1 << 29
	return min(a+b, most)
}

// ParseJSON reads one JSON value into a tree, with the line of each value,
// within FileLimits.
func ParseJSON(data []byte) (*Node, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &Error{Err: ErrEmpty}
	}
	lines := lineStarts(data)
	p := &jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), lines: lines, b: Budget{Limits: FileLimits}}
	p.dec.UseNumber()
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	n, err := p.value(tok, 0)
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Line: p.line(), Err: errors.New("not valid JSON: more data after the top-level value")}
	}
	return n, nil
}

// lineStarts returns the offset of the start of each line of data.
func lineStarts(data []byte) []int64 {
	starts := []int64{0}
	for i, c := range data {
		if c == '\n' {
			starts = append(starts, int64(i+1))
		}
	}
	return starts
}

type jsonParser struct {
	dec   *json.Decoder
	lines []int64
	b     Budget
}

// lineAt returns the 1-based line holding offset.
func (p *jsonParser) lineAt(off int64) int {
	return sort.Search(len(p.lines), func(i int) bool { return p.lines[i] > off })
}

// line is the line of the last token read (its last byte).
func (p *jsonParser) line() int { return p.lineAt(max(p.dec.InputOffset()-1, 0)) }

func (p *jsonParser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, &Error{Line: p.lineAt(max(syn.Offset-1, 0)), Err: fmt.Errorf("not valid JSON: %w", err)}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &Error{Line: len(p.lines), Err: errors.New("not valid JSON: the file ends too soon")}
		}
		return nil, &Error{Line: p.line(), Err: fmt.Errorf("not valid JSON: %w", err)}
	}
	return tok, nil
}

func (p *jsonParser) value(tok json.Token, depth int) (*Node, error) {
	line := p.line()
	if err := p.b.Value(depth, line); err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &Node{Kind: MapNode, Line: line}
			for p.dec.More() {
				kt, err := p.token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, &Error{Line: p.line(), Err: errors.New("not valid JSON: an object key must be a string")}
				}
				keyLine := p.line()
				vt, err := p.token()
				if err != nil {
					return nil, err
				}
				v, err := p.value(vt, depth+1)
				if err != nil {
					return nil, err
				}
				n.Pairs = append(n.Pairs, Pair{Key: key, KeyLine: keyLine, Val: v})
			}
			if _, err := p.token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &Node{Kind: SeqNode, Line: line}
			for p.dec.More() {
				et, err := p.token()
				if err != nil {
					return nil, err
				}
				v, err := p.value(et, depth+1)
				if err != nil {
					return nil, err
				}
				n.Items = append(n.Items, v)
			}
			if _, err := p.token(); err != nil { // ']'
				return nil, err
			}
			return n, nil
		}
		return nil, &Error{Line: line, Err: fmt.Errorf("not valid JSON: unexpected %q", t)}
	case string:
		return &Node{Kind: ScalarNode, Tag: StrTag, Line: line, Value: t}, nil
	case json.Number:
		n := &Node{Kind: ScalarNode, Tag: FloatTag, Line: line, Value: t.String()}
		if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
			n.Tag = IntTag
		}
		return n, nil
	case bool:
		return &Node{Kind: ScalarNode, Tag: BoolTag, Line: line, Value: strconv.FormatBool(t)}, nil
	case nil:
		return &Node{Kind: ScalarNode, Tag: NullTag, Line: line, Value: "null"}, nil
	}
	return nil, &Error{Line: line, Err: fmt.Errorf("not valid JSON: unexpected token %v", tok)}
}

// Package settings is the one decoding path of limiter.Config, shared by
// its UnmarshalJSON and by limiter/config's files: a tree of values that
// YAML and JSON both read into, with the line of each, and a Decoder whose
// checks and error messages every field goes through. Package limiter owns
// the Config's fields and registers their decoding here (Limit), so the
// list of fields is written once.
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// Bounds on a document's shape. A limits file is a few dozen nodes; these
// stop a hostile or broken one (YAML aliases that expand exponentially, deep
// nesting) before it costs memory or time.
const (
	MaxNodes = 100_000
	MaxDepth = 64
)

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
// the line it starts on.
type Node struct {
	Kind  Kind
	Tag   Tag
	Line  int
	Value string // a scalar's text
	Pairs []Pair // a mapping's entries, in document order
}

// Pair is one entry of a mapping.
type Pair struct {
	Key     string
	KeyLine int
	Val     *Node
}

// Error is what is wrong with a value, and where: limiter/config turns it
// into its *Error, limiter into "field: problem".
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

// Budget counts nodes while a tree is built.
type Budget struct{ nodes int }

// Add counts one node at depth and line, and fails past the bounds.
func (b *Budget) Add(depth, line int) error {
	b.nodes++
	if b.nodes > MaxNodes {
		return &Error{Line: line, Err: fmt.Errorf("more than %d values (YAML aliases expanding?); a limits file is much smaller", MaxNodes)}
	}
	if depth > MaxDepth {
		return &Error{Line: line, Err: fmt.Errorf("nested more than %d levels deep", MaxDepth)}
	}
	return nil
}

// ParseJSON reads one JSON value into a tree, with the line of each value.
func ParseJSON(data []byte) (*Node, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &Error{Err: errors.New("the file is empty")}
	}
	lines := lineStarts(data)
	p := &jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), lines: lines}
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
	if err := p.b.Add(depth, line); err != nil {
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
				if _, err := p.value(et, depth+1); err != nil {
					return nil, err
				}
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

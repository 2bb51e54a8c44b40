package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Bounds on a file's shape. A limits file is a few dozen nodes; these stop
// a hostile or broken one (YAML aliases that expand exponentially, deep
// nesting) before it costs memory or time.
const (
	maxNodes = 100_000
	maxDepth = 64
)

// kind is what a node of a parsed file holds.
type kind uint8

const (
	scalarNode kind = iota
	mapNode
	seqNode
)

// tag is the type of a scalar as its format wrote it.
type tag uint8

const (
	strTag tag = iota
	intTag
	floatTag
	boolTag
	nullTag
)

// node is one value of a file, in a form shared by YAML and JSON, with the
// line it starts on.
type node struct {
	kind  kind
	tag   tag
	line  int
	value string // a scalar's text
	pairs []pair // a mapping's entries, in file order
}

// pair is one entry of a mapping.
type pair struct {
	key     string
	keyLine int
	val     *node
}

// budget counts nodes while a tree is built.
type budget struct{ nodes int }

func (b *budget) add(depth, line int) error {
	b.nodes++
	if b.nodes > maxNodes {
		return &Error{Line: line, Err: fmt.Errorf("more than %d values (YAML aliases expanding?); a limits file is much smaller", maxNodes)}
	}
	if depth > maxDepth {
		return &Error{Line: line, Err: fmt.Errorf("nested more than %d levels deep", maxDepth)}
	}
	return nil
}

// parseYAML reads one YAML document into a tree.
func parseYAML(data []byte) (*node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Err: errors.New("the file is empty")}
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &Error{Line: line, Err: errors.New("a second YAML document (after ---); write one document")}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	var b budget
	return fromYAML(&doc, &b, 0)
}

// yamlError turns the YAML library's error ("yaml: line 3: ...") into an
// Error with the line as a field.
func yamlError(err error) error {
	msg := err.Error()
	var line int
	if n, rest, ok := cutLine(msg); ok {
		line, msg = n, rest
		if slices.Contains(parserProblems, msg) {
			// The YAML library reports where the enclosing block
			// starts, counting lines from 0.
			line++
			msg += " in the block that starts here; check the indentation and brackets below"
		}
	}
	return &Error{Line: line, Err: fmt.Errorf("not valid YAML: %s", msg)}
}

// parserProblems are the YAML library's errors whose line is that of the
// enclosing block rather than the offending line.
var parserProblems = []string{
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
}

// cutLine splits "yaml: line N: rest" into N and rest.
func cutLine(msg string) (int, string, bool) {
	const p = "yaml: line "
	if !bytes.HasPrefix([]byte(msg), []byte(p)) {
		return 0, msg, false
	}
	rest := msg[len(p):]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil || i+2 > len(rest) || rest[i:i+2] != ": " {
		return 0, msg, false
	}
	return n, rest[i+2:], true
}

func fromYAML(y *yaml.Node, b *budget, depth int) (*node, error) {
	if err := b.add(depth, y.Line); err != nil {
		return nil, err
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil, &Error{Line: y.Line, Err: errors.New("the file is empty")}
		}
		return fromYAML(y.Content[0], b, depth+1)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &Error{Line: y.Line, Err: fmt.Errorf("alias *%s names no anchor", y.Value)}
		}
		return fromYAML(y.Alias, b, depth+1)
	case yaml.MappingNode:
		n := &node{kind: mapNode, line: y.Line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, &Error{Line: k.Line, Err: errors.New("a mapping key must be a plain name")}
			}
			if k.ShortTag() == "!!merge" {
				return nil, &Error{Line: k.Line, Err: errors.New("merge keys (<<) are not supported; write the fields out")}
			}
			v, err := fromYAML(y.Content[i+1], b, depth+1)
			if err != nil {
				return nil, err
			}
			n.pairs = append(n.pairs, pair{key: k.Value, keyLine: k.Line, val: v})
		}
		return n, nil
	case yaml.SequenceNode:
		n := &node{kind: seqNode, line: y.Line}
		for _, c := range y.Content {
			if _, err := fromYAML(c, b, depth+1); err != nil {
				return nil, err
			}
		}
		return n, nil
	case yaml.ScalarNode:
		n := &node{kind: scalarNode, line: y.Line, value: y.Value}
		switch y.ShortTag() {
		case "!!int":
			n.tag = intTag
		case "!!float":
			n.tag = floatTag
		case "!!bool":
			n.tag = boolTag
		case "!!null":
			n.tag = nullTag
		default:
			n.tag = strTag
		}
		return n, nil
	}
	return nil, &Error{Line: y.Line, Err: fmt.Errorf("unexpected YAML node kind %d", y.Kind)}
}

// parseJSON reads one JSON value into a tree, with the line of each value.
func parseJSON(data []byte) (*node, error) {
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
	b     budget
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

func (p *jsonParser) value(tok json.Token, depth int) (*node, error) {
	line := p.line()
	if err := p.b.add(depth, line); err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: mapNode, line: line}
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
				n.pairs = append(n.pairs, pair{key: key, keyLine: keyLine, val: v})
			}
			if _, err := p.token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: seqNode, line: line}
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
		return &node{kind: scalarNode, tag: strTag, line: line, value: t}, nil
	case json.Number:
		n := &node{kind: scalarNode, tag: floatTag, line: line, value: t.String()}
		if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
			n.tag = intTag
		}
		return n, nil
	case bool:
		return &node{kind: scalarNode, tag: boolTag, line: line, value: strconv.FormatBool(t)}, nil
	case nil:
		return &node{kind: scalarNode, tag: nullTag, line: line, value: "null"}, nil
	}
	return nil, &Error{Line: line, Err: fmt.Errorf("not valid JSON: unexpected token %v", tok)}
}

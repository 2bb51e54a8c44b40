// Package yamltree reads a YAML document into configtree's tree, the one
// place of the project that reads YAML nodes: limiter/config's files and
// the rate limit service's (module rls) both come through Parse. It is a
// package of its own so that package limiter, which reads JSON through
// configtree, does not link a YAML library.
//
// Stability: as package configtree's; before v1 Parse may change in any
// minor release.
package yamltree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/limitkit/limitkit/limiter/configtree"
)

// Parse reads one YAML document into a tree, within lim. An alias is the
// node its anchor names (shared, not copied), counted in lim as the values
// it stands for. Errors are *configtree.Error with the line; an empty
// document's wraps configtree.ErrEmpty.
func Parse(data []byte, lim configtree.Limits) (*configtree.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &configtree.Error{Err: configtree.ErrEmpty}
		}
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &configtree.Error{Line: line, Err: errors.New("a second YAML document (after ---); write one document")}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(err)
	}
	if len(doc.Content) == 0 {
		return nil, &configtree.Error{Line: doc.Line, Err: configtree.ErrEmpty}
	}
	r := reader{b: configtree.Budget{Limits: lim}, anchors: map[*yaml.Node]*anchored{}}
	n, _, err := r.node(doc.Content[0], 1)
	return n, err
}

// syntaxError turns the YAML library's error ("yaml: line 3: ...") into an
// Error with the line as a field.
func syntaxError(err error) error {
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
	return &configtree.Error{Line: line, Err: fmt.Errorf("not valid YAML: %s", msg)}
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

// shape is what a subtree stands for once its aliases are expanded.
type shape struct {
	values int // its values (saturating, configtree.SizeAdd)
	height int // its levels
}

// anchored is a node an anchor names, once read; done is false while the
// node itself is being read (an alias inside it would loop).
type anchored struct {
	node  *configtree.Node
	shape shape
	done  bool
}

// reader builds a tree, reading each anchored node once.
type reader struct {
	b       configtree.Budget
	anchors map[*yaml.Node]*anchored
}

// node reads y at depth (the document's value is at 1).
func (r *reader) node(y *yaml.Node, depth int) (*configtree.Node, shape, error) {
	if y.Kind == yaml.AliasNode {
		return r.alias(y, depth)
	}
	if err := r.b.Value(depth, y.Line); err != nil {
		return nil, shape{}, err
	}
	var a *anchored
	if y.Anchor != "" {
		a = &anchored{}
		r.anchors[y] = a
	}
	n, s, err := r.value(y, depth)
	if err == nil && a != nil {
		*a = anchored{node: n, shape: s, done: true}
	}
	return n, s, err
}

// alias returns the node the alias names, counting what it stands for.
func (r *reader) alias(y *yaml.Node, depth int) (*configtree.Node, shape, error) {
	a := r.anchors[y.Alias]
	if y.Alias == nil || a == nil {
		return nil, shape{}, &configtree.Error{Line: y.Line, Err: fmt.Errorf("alias *%s names no anchor", y.Value)}
	}
	if !a.done {
		return nil, shape{}, &configtree.Error{Line: y.Line, Err: fmt.Errorf("alias *%s is inside its own anchor; it would never end", y.Value)}
	}
	if err := r.b.Alias(a.shape.values, depth, a.shape.height-1, y.Line); err != nil {
		return nil, shape{}, err
	}
	return a.node, a.shape, nil
}

// value reads the content of y, counted already.
func (r *reader) value(y *yaml.Node, depth int) (*configtree.Node, shape, error) {
	s := shape{values: 1, height: 1}
	add := func(c shape) {
		s.values = configtree.SizeAdd(s.values, c.values)
		s.height = max(s.height, c.height+1)
	}
	switch y.Kind {
	case yaml.MappingNode:
		n := &configtree.Node{Kind: configtree.MapNode, Line: y.Line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, s, &configtree.Error{Line: k.Line, Err: errors.New("a mapping key must be a plain name")}
			}
			if k.ShortTag() == "!!merge" {
				return nil, s, &configtree.Error{Line: k.Line, Err: errors.New("merge keys (<<) are not supported; write the fields out")}
			}
			if k.Anchor != "" { // an alias may name a key as a value
				r.anchors[k] = &anchored{node: scalar(k), shape: shape{values: 1, height: 1}, done: true}
			}
			v, c, err := r.node(y.Content[i+1], depth+1)
			if err != nil {
				return nil, s, err
			}
			add(c)
			n.Pairs = append(n.Pairs, configtree.Pair{Key: k.Value, KeyTag: scalar(k).Tag, KeyLine: k.Line, Val: v})
		}
		return n, s, nil
	case yaml.SequenceNode:
		n := &configtree.Node{Kind: configtree.SeqNode, Line: y.Line}
		for _, item := range y.Content {
			v, c, err := r.node(item, depth+1)
			if err != nil {
				return nil, s, err
			}
			add(c)
			n.Items = append(n.Items, v)
		}
		return n, s, nil
	case yaml.ScalarNode:
		return scalar(y), s, nil
	}
	return nil, s, &configtree.Error{Line: y.Line, Err: fmt.Errorf("unexpected YAML node kind %d", y.Kind)}
}

// scalar reads a scalar with its type. A boolean's text is "true" or
// "false" whatever its spelling (True, FALSE).
func scalar(y *yaml.Node) *configtree.Node {
	n := &configtree.Node{Kind: configtree.ScalarNode, Line: y.Line, Value: y.Value}
	switch y.ShortTag() {
	case "!!int":
		n.Tag = configtree.IntTag
	case "!!float":
		n.Tag = configtree.FloatTag
	case "!!bool":
		var b bool
		if err := y.Decode(&b); err == nil {
			n.Tag, n.Value = configtree.BoolTag, strconv.FormatBool(b)
		}
	case "!!null":
		n.Tag = configtree.NullTag
	default:
		n.Tag = configtree.StrTag
	}
	return n
}

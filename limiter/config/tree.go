package config

// A file is read into the tree of package settings (limiter/internal/settings),
// which JSON also reads into; this file adds YAML.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/limitkit/limitkit/limiter/internal/settings"
)

// parseYAML reads one YAML document into a tree.
func parseYAML(data []byte) (*settings.Node, error) {
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
	var b settings.Budget
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

func fromYAML(y *yaml.Node, b *settings.Budget, depth int) (*settings.Node, error) {
	if err := b.Add(depth, y.Line); err != nil {
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
		n := &settings.Node{Kind: settings.MapNode, Line: y.Line}
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
			n.Pairs = append(n.Pairs, settings.Pair{Key: k.Value, KeyLine: k.Line, Val: v})
		}
		return n, nil
	case yaml.SequenceNode:
		n := &settings.Node{Kind: settings.SeqNode, Line: y.Line}
		for _, c := range y.Content {
			if _, err := fromYAML(c, b, depth+1); err != nil {
				return nil, err
			}
		}
		return n, nil
	case yaml.ScalarNode:
		n := &settings.Node{Kind: settings.ScalarNode, Line: y.Line, Value: y.Value}
		switch y.ShortTag() {
		case "!!int":
			n.Tag = settings.IntTag
		case "!!float":
			n.Tag = settings.FloatTag
		case "!!bool":
			n.Tag = settings.BoolTag
		case "!!null":
			n.Tag = settings.NullTag
		default:
			n.Tag = settings.StrTag
		}
		return n, nil
	}
	return nil, &Error{Line: y.Line, Err: fmt.Errorf("unexpected YAML node kind %d", y.Kind)}
}

package configtree

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/internal/suggest"
)

// Decoder checks and converts the values of a tree: strict fields (Each,
// Unknown), typed scalars, errors with the line and the dotted path. Its
// zero value stops at the first problem; limiter/config sets Report to
// collect them all.
type Decoder struct {
	// Lines, when not nil, gets the line of each field read, keyed by its
	// dotted path.
	Lines map[string]int
	// Typos, when not nil, gets the fields an unknown field looked like
	// (so that they are not also reported missing).
	Typos map[string]bool
	// Report, when not nil, receives the problems of a mapping's fields
	// (Each goes on to the next field) and repeated keys (Mapping leaves
	// the repeat out); when nil, they stop the walk.
	Report func(error)
}

// Join appends key to the dotted path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d Decoder) record(path string, line int) {
	if d.Lines != nil && path != "" {
		d.Lines[path] = line
	}
}

// Unknown reports the field f of the mapping at path as unknown; known
// lists the fields there.
func (d Decoder) Unknown(f Pair, path, known string) error {
	fields := strings.Split(known, ", ")
	if n := suggest.Nearest(f.Key, fields); n != "" && d.Typos != nil {
		// The field is misspelt, not missing: say so once.
		d.Typos[Join(path, n)] = true
	}
	return &Error{Line: f.KeyLine, Field: Join(path, f.Key),
		Err: fmt.Errorf("unknown field%s; the fields here are %s", suggest.DidYouMean(f.Key, fields), known)}
}

// Mapping checks n is a mapping and records its line. A null value counts
// as an empty mapping. A key given twice is a problem (see Report).
func (d Decoder) Mapping(n *Node, path string) ([]Pair, error) {
	d.record(path, n.Line)
	if n.Kind == ScalarNode && n.Tag == NullTag {
		return nil, nil
	}
	if n.Kind != MapNode {
		return nil, &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s is not a mapping of fields", Describe(n))}
	}
	pairs := make([]Pair, 0, len(n.Pairs))
	first := make(map[string]int, len(n.Pairs)) // a key's first line
	for _, p := range n.Pairs {
		if line, twice := first[p.Key]; twice {
			err := &Error{Line: p.KeyLine, Field: Join(path, p.Key), Err: fmt.Errorf("given twice (also on line %d)", line)}
			if d.Report == nil {
				return nil, err
			}
			d.Report(err)
			continue
		}
		first[p.Key] = p.KeyLine
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// Each checks n is a mapping (see Mapping) and calls fn for each field with
// its path. fn's problems go to Report, or stop the walk. It returns the
// error of n itself (not a mapping), for its caller to report.
func (d Decoder) Each(n *Node, path string, fn func(f Pair, p string) error) error {
	fields, err := d.Mapping(n, path)
	if err != nil {
		return err
	}
	for _, f := range fields {
		if err := fn(f, Join(path, f.Key)); err != nil {
			if d.Report == nil {
				return err
			}
			d.Report(err)
		}
	}
	return nil
}

// Describe names n's value for an error message.
func Describe(n *Node) string {
	switch n.Kind {
	case MapNode:
		return "a mapping"
	case SeqNode:
		return "a list"
	}
	if n.Tag == NullTag {
		return "an empty value"
	}
	return strconv.Quote(Shorten(n.Value))
}

// Shorten bounds text of a document echoed in an error.
func Shorten(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "..."
}

// Scalar checks n is a non-null scalar and records its line.
func (d Decoder) Scalar(n *Node, path string) error {
	d.record(path, n.Line)
	if n.Kind != ScalarNode || n.Tag == NullTag {
		return &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s where a value is expected", Describe(n))}
	}
	return nil
}

// Str reads a string.
func (d Decoder) Str(n *Node, path string) (string, error) {
	if err := d.Scalar(n, path); err != nil {
		return "", err
	}
	if n.Tag != StrTag {
		return "", &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s is not a string; quote it", Shorten(n.Value))}
	}
	return n.Value, nil
}

// Strings reads a list of strings; a null value is an empty list. Item i's
// path is path.i.
func (d Decoder) Strings(n *Node, path string) ([]string, error) {
	d.record(path, n.Line)
	if n.Kind == ScalarNode && n.Tag == NullTag {
		return nil, nil
	}
	if n.Kind != SeqNode {
		return nil, &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s is not a list; write [\"a\", \"b\"]", Describe(n))}
	}
	out := make([]string, 0, len(n.Items))
	for i, item := range n.Items {
		s, err := d.Str(item, Join(path, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Int64 reads a whole number.
func (d Decoder) Int64(n *Node, path string) (int64, error) {
	if err := d.Scalar(n, path); err != nil {
		return 0, err
	}
	if n.Tag == IntTag {
		if v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return v, nil
		}
	}
	return 0, &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s is not a whole number", strconv.Quote(Shorten(n.Value)))}
}

// Int reads a whole number that fits 32 bits.
func (d Decoder) Int(n *Node, path string) (int, error) {
	v, err := d.Int64(n, path)
	if err == nil && (v < -1<<31 || v > 1<<31-1) {
		return 0, &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%d is out of range", v)}
	}
	return int(v), err
}

// Bool reads true or false.
func (d Decoder) Bool(n *Node, path string) (bool, error) {
	if err := d.Scalar(n, path); err != nil {
		return false, err
	}
	if n.Tag != BoolTag {
		return false, &Error{Line: n.Line, Field: path, Err: fmt.Errorf("%s is not true or false", strconv.Quote(Shorten(n.Value)))}
	}
	return n.Value == "true", nil
}

// Duration reads a duration string such as "1m".
func (d Decoder) Duration(n *Node, path string) (time.Duration, error) {
	if err := d.Scalar(n, path); err != nil {
		return 0, err
	}
	v, err := time.ParseDuration(n.Value)
	if n.Tag != StrTag || err != nil {
		return 0, &Error{Line: n.Line, Field: path,
			Err: fmt.Errorf("%s is not a duration; write it like \"1m\", \"90s\" or \"500ms\"", strconv.Quote(Shorten(n.Value)))}
	}
	return v, nil
}

// DidYouMean returns ` (did you mean "x"?)` for the option nearest to got
// (see Nearest), or "" when none is near: the suggestion every error of
// this package about a name makes, for readers (rls) that check names of
// their own.
func DidYouMean(got string, options []string) string { return suggest.DidYouMean(got, options) }

// Nearest returns the option nearest to got, or "" when none is near:
// within a third of got's length in edits, or got being the start of the
// other (at least 3 letters).
func Nearest(got string, options []string) string { return suggest.Nearest(got, options) }

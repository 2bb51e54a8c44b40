package httplimit

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A strict parser of RFC 9651 (Structured Field Values) Lists, written from
// the RFC's parsing algorithms (sections 4.2.1 to 4.2.7), for checking the
// fields the middleware sends: anything the RFC would reject is an error.
// Inner Lists are rejected too: neither draft field uses them.

// sfItem is one List member: a bare item and its parameters in order.
type sfItem struct {
	value  any // int64, float64 (Decimal), sfString, sfToken, []byte, bool
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type sfString string
type sfToken string

func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return nil, false
}

// parseSFList parses the field lines of one field as a List: the lines are
// combined with ", " (RFC 9110, section 5.3), as a recipient does.
func parseSFList(lines []string) ([]sfItem, error) {
	p := &sfParser{s: strings.Join(lines, ", ")}
	p.skipSP() // leading SP is discarded (4.2, step 2)
	var items []sfItem
	for p.i < len(p.s) {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.i == len(p.s) {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ',' after a list member")
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return items, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("sf: at %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	if p.i < len(p.s) && p.s[p.i] == '(' {
		return sfItem{}, p.errorf("inner list")
	}
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.parameters()
	return sfItem{value: v, params: params}, err
}

func (p *sfParser) parameters() ([]sfParam, error) {
	var out []sfParam
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		// A repeated key overwrites the earlier value in place (4.2.3.2).
		replaced := false
		for j := range out {
			if out[j].key == k {
				out[j].value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, sfParam{k, v})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i >= len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.errorf("a key starts with a-z or '*'")
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.i >= len(p.s) {
		return nil, p.errorf("missing item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.string()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case isAlpha(c) || c == '*':
		return p.token(), nil
	default:
		return nil, p.errorf("unexpected %q", c)
	}
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.s) || !isDigit(p.s[p.i]) {
		return nil, p.errorf("a number needs a digit")
	}
	digits, decimal, fracDigits := 0, false, 0
	for p.i < len(p.s) {
		c := p.s[p.i]
		if isDigit(c) {
			digits++
			if decimal {
				fracDigits++
			}
		} else if c == '.' && !decimal {
			if digits > 12 {
				return nil, p.errorf("decimal with more than 12 integer digits")
			}
			decimal = true
		} else {
			break
		}
		p.i++
		if !decimal && digits > 15 {
			return nil, p.errorf("integer with more than 15 digits")
		}
	}
	text := p.s[start:p.i]
	if !decimal {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, p.errorf("integer: %v", err)
		}
		return n, nil
	}
	if text[len(text)-1] == '.' || fracDigits > 3 {
		return nil, p.errorf("decimal needs 1 to 3 fraction digits")
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, p.errorf("decimal: %v", err)
	}
	return f, nil
}

func (p *sfParser) string() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return nil, p.errorf("bad escape in string")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return sfString(b.String()), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

func (p *sfParser) token() sfToken {
	start := p.i
	for p.i < len(p.s) && isTChar(p.s[p.i]) {
		p.i++
	}
	return sfToken(p.s[start:p.i])
}

func (p *sfParser) bytes() (any, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[p.i : p.i+end])
	if err != nil {
		return nil, p.errorf("byte sequence: %v", err)
	}
	p.i += end + 1
	return b, nil
}

func (p *sfParser) boolean() (any, error) {
	p.i++ // '?'
	if p.i < len(p.s) && (p.s[p.i] == '0' || p.s[p.i] == '1') {
		p.i++
		return p.s[p.i-1] == '1', nil
	}
	return nil, p.errorf("boolean is ?0 or ?1")
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// policy is a RateLimit-Policy item, checked against the draft.
type policy struct{ q, w int64 }

// service is a RateLimit item, checked against the draft; t is -1 when
// absent.
type service struct{ r, t int64 }

// parseDraftFields parses both draft fields of a response strictly: syntax
// by RFC 9651, then draft-11's rules (String item values; q a non-negative
// Integer and w a positive one; r a non-negative Integer, t absent or a
// non-negative Integer; every RateLimit item names a listed policy; names
// unique within a field).
func parseDraftFields(policyLines, limitLines []string) (map[string]policy, map[string]service, error) {
	pols := map[string]policy{}
	if len(policyLines) > 0 {
		items, err := parseSFList(policyLines)
		if err != nil {
			return nil, nil, err
		}
		if len(items) == 0 {
			return nil, nil, errors.New("RateLimit-Policy is an empty list")
		}
		for _, it := range items {
			name, ok := it.value.(sfString)
			if !ok {
				return nil, nil, fmt.Errorf("policy item %v is not a String", it.value)
			}
			q, ok := intParam(it, "q")
			if !ok || q < 0 {
				return nil, nil, fmt.Errorf("policy %q: q is not a non-negative Integer", name)
			}
			w, ok := intParam(it, "w")
			if !ok || w <= 0 {
				return nil, nil, fmt.Errorf("policy %q: w is not a positive Integer", name)
			}
			if _, dup := pols[string(name)]; dup {
				return nil, nil, fmt.Errorf("policy %q listed twice", name)
			}
			pols[string(name)] = policy{q, w}
		}
	}
	svcs := map[string]service{}
	if len(limitLines) > 0 {
		items, err := parseSFList(limitLines)
		if err != nil {
			return nil, nil, err
		}
		for _, it := range items {
			name, ok := it.value.(sfString)
			if !ok {
				return nil, nil, fmt.Errorf("service limit item %v is not a String", it.value)
			}
			r, ok := intParam(it, "r")
			if !ok || r < 0 {
				return nil, nil, fmt.Errorf("service limit %q: r is not a non-negative Integer", name)
			}
			t := int64(-1)
			if _, present := it.param("t"); present {
				if t, ok = intParam(it, "t"); !ok || t < 0 {
					return nil, nil, fmt.Errorf("service limit %q: t is not a non-negative Integer", name)
				}
			}
			if _, listed := pols[string(name)]; !listed && len(policyLines) > 0 {
				return nil, nil, fmt.Errorf("service limit %q names no listed policy", name)
			}
			if _, dup := svcs[string(name)]; dup {
				return nil, nil, fmt.Errorf("service limit %q given twice", name)
			}
			svcs[string(name)] = service{r, t}
		}
	}
	return pols, svcs, nil
}

func intParam(it sfItem, key string) (int64, bool) {
	v, ok := it.param(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok
}

// TestSFParser: the checker itself accepts what RFC 9651 and the draft
// allow and rejects what they do not, so a test passing through it means
// something.
func TestSFParser(t *testing.T) {
	for _, ok := range []struct{ policy, limit string }{
		{`"default";q=100;w=60`, `"default";r=50;t=30`},
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, `"daily";r=7`},
		{`"burst";q=100;w=60, "daily";q=1000;w=86400`, `"burst";r=0;t=5, "daily";r=7;t=9`},
		{`"peruser";q=65535;qu="content-bytes";w=10;pk=:c2RmamxqdW91aA==:`, `"peruser";r=1;pk=:c2RmamxqdW91aA==:;acme-x=?1`},
		{`"a \"b\" \\c";q=0;w=1`, `"a \"b\" \\c";r=0;t=0`},
	} {
		_, _, err := parseDraftFields([]string{ok.policy}, []string{ok.limit})
		assert.NoError(t, err, "%s / %s", ok.policy, ok.limit)
	}
	for _, bad := range []struct{ policy, limit string }{
		{`default;q=100;w=60`, `"default";r=1`},                            // a Token, not a String
		{`"default";q=100;w=60,`, `"default";r=1`},                         // trailing comma
		{`"default";q=100;w=60`, `"default";r=1;t=60,`},                    // trailing comma
		{`"default";q=100;w=60`, `"default";r=-1`},                         // negative r
		{`"default";q=100;w=60`, `"default";r=1.5`},                        // Decimal r
		{`"default";q=100;w=60`, `"default";t=3`},                          // r missing
		{`"default";q=100;w=0`, `"default";r=1`},                           // w not positive
		{`"default";q=100`, `"default";r=1`},                               // w missing (this middleware always sends it)
		{`"default";Q=100;w=60`, `"default";r=1`},                          // upper-case key
		{`"default" ;q=100;w=60`, `"default";r=1`},                         // space before ';'
		{`"default";q=100;w=60`, `"default";r=1;t=1234567890123456`},       // 16 digits
		{`"default";q=100;w=60`, `"other";r=1`},                            // names no listed policy
		{`"default";q=100;w=60`, `"default";r=1, "default";r=2`},           // twice
		{`"caf` + "\xc3\xa9" + `";q=1;w=1`, `"caf` + "\xc3\xa9" + `";r=1`}, // non-ASCII in a String
		{`"default";q=100;w=60`, `"default";r=1;t="30"`},                   // String t
		{`"unterminated;q=1;w=1`, `"unterminated";r=1`},
		{`("a" "b");q=1;w=1`, `"a";r=1`}, // inner list
	} {
		_, _, err := parseDraftFields([]string{bad.policy}, []string{bad.limit})
		assert.Error(t, err, "%s / %s", bad.policy, bad.limit)
	}
	// Split over several field lines, as the draft allows.
	pols, svcs, err := parseDraftFields([]string{`"a";q=1;w=1`, `"b";q=2;w=2`}, []string{`"a";r=0;t=1`, `"b";r=1`})
	require.NoError(t, err)
	assert.Equal(t, map[string]policy{"a": {1, 1}, "b": {2, 2}}, pols)
	assert.Equal(t, map[string]service{"a": {0, 1}, "b": {1, -1}}, svcs)
}

package docscheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// line is one line of Markdown outside fenced code blocks.
type line struct {
	n       int // 1-based line number in the file
	text    string
	heading bool
}

// prose drops fenced code blocks (``` or ~~~), whose "#" lines are not
// headings and whose "](" are not links.
func prose(lines []string) []line {
	var out []line
	fence := ""
	for i, text := range lines {
		trimmed := strings.TrimSpace(text)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, line{n: i + 1, text: text, heading: headingText(text) != ""})
	}
	return out
}

// headingText returns an ATX heading's text ("" when l is not a heading).
func headingText(l string) string {
	level := len(l) - len(strings.TrimLeft(l, "#"))
	if level == 0 || level > 6 || len(l) == level || l[level] != ' ' {
		return ""
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(l[level:]), "#"))
}

var (
	codeSpan   = regexp.MustCompile("`[^`]*`")
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	urlScheme  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// Slug is the anchor GitHub gives a heading's text: lower case, markup and
// punctuation dropped (letters, digits, "-" and "_" kept), spaces as "-".
func Slug(heading string) string {
	text := linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings, with GitHub's
// "-1", "-2" suffixes for repeated ones.
func anchors(lines []string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(lines) {
		if !l.heading {
			continue
		}
		s := Slug(headingText(l.text))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// BrokenLinks checks every relative link in README.md and docs/*.md under
// root: its file must exist and, for "file.md#anchor" or "#anchor", the
// anchor must be a heading there. It returns one line per broken link,
// "path:line: link: what is wrong"; none when all are good. Links with a
// scheme (https:, mailto:) are not followed.
func BrokenLinks(root string) ([]string, error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	cache := map[string][]string{}
	read := func(rel string) ([]string, error) {
		if l, ok := cache[rel]; ok {
			return l, nil
		}
		l, err := readLines(filepath.Join(root, filepath.FromSlash(rel)))
		cache[rel] = l
		return l, err
	}
	var broken []string
	for _, rel := range files {
		lines, err := read(rel)
		if err != nil {
			return nil, err
		}
		for _, l := range prose(lines) {
			for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
				if msg := checkLink(root, rel, m[1], read); msg != "" {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", rel, l.n, m[1], msg))
				}
			}
		}
	}
	return broken, nil
}

// checkLink returns what is wrong with target, linked from the file from
// (relative to root), or "".
func checkLink(root, from, target string, read func(string) ([]string, error)) string {
	if urlScheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	rel := from
	if file != "" {
		rel = path.Clean(path.Join(path.Dir(from), file))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return "no such file " + rel + "; fix the path (relative to " + path.Dir(from) + "/)"
		}
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	lines, err := read(rel)
	if err != nil {
		return err.Error()
	}
	if !anchors(lines)[anchor] {
		return "no heading #" + anchor + " in " + rel + "; link a heading's anchor (lower case, punctuation dropped, spaces as -)"
	}
	return ""
}

// Section is the text under one heading of any level, up to the next
// heading; Lines counts the heading line too. Text before the first
// heading is a section with an empty Heading.
type Section struct {
	Heading string
	Line    int // where it starts, 1-based
	Lines   int
}

// Sections splits a Markdown file into its sections, in order; the line
// count of the file is the sum of their Lines.
func Sections(file string) ([]Section, error) {
	lines, err := readLines(file)
	if err != nil {
		return nil, err
	}
	var out []Section
	cur := Section{Line: 1}
	for _, l := range prose(lines) {
		if !l.heading {
			continue
		}
		if cur.Line < l.n {
			cur.Lines = l.n - cur.Line
			out = append(out, cur)
		}
		cur = Section{Heading: l.text, Line: l.n}
	}
	cur.Lines = len(lines) - cur.Line + 1
	if cur.Lines > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// Unlinked returns the guides (docs/*.md under root) that README.md does
// not link to.
func Unlinked(root string) ([]string, error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	lines, err := readLines(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	linked := map[string]bool{}
	for _, l := range prose(lines) {
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
			file, _, _ := strings.Cut(m[1], "#")
			linked[path.Clean(file)] = true
		}
	}
	var out []string
	for _, f := range files[1:] { // files[0] is README.md
		if !linked[f] {
			out = append(out, f)
		}
	}
	return out, nil
}

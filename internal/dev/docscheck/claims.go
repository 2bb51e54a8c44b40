package docscheck

// Checks of what the documents claim about the repository: list items
// that lost their first line, tests cited that do not exist, go test
// commands that leave out a module, go run commands with flags the
// program lacks, and example rows whose figures the example does not have.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var (
	listItem  = regexp.MustCompile(`^\s*([-*+]|\d+[.)])\s`)
	testName  = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*`)
	testFunc  = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	runFlag   = regexp.MustCompile(`-run[= ]+('[^']*'|"[^"]*"|\S+)`)
	flagDef   = regexp.MustCompile(`\b\w+\.(?:String|Bool|Int|Int64|Uint|Uint64|Float64|Duration|Func|BoolFunc|TextVar|Var|StringVar|BoolVar|IntVar|Int64Var|UintVar|Uint64Var|Float64Var|DurationVar)\((?:&[^,]+,\s*)?"([\w.-]+)"`)
	numberRe  = regexp.MustCompile(`\d+`)
	exampleRe = regexp.MustCompile("^\\|\\s*`go run (\\./examples/[\\w/-]+)`\\s*\\|(.*)\\|\\s*$")
)

// BrokenBullets returns "file:line: ..." for each indented line that
// opens a paragraph outside any list: a list item's continuation whose
// first line ("- **...**") was lost, which renders as a stray paragraph.
func BrokenBullets(root string) ([]string, error) {
	var out []string
	err := eachDoc(root, func(file string, lines []line) {
		inList, prevBlank := false, true
		for _, l := range lines {
			blank := strings.TrimSpace(l.text) == ""
			switch {
			case blank:
			case l.heading:
				inList = false
			case listItem.MatchString(l.text):
				inList = true
			case strings.HasPrefix(l.text, " ") && !inList && prevBlank && !strings.HasPrefix(strings.TrimSpace(l.text), "|"):
				out = append(out, fmt.Sprintf("%s:%d: an indented line outside a list (a list item lost its first line?): %q", file, l.n, clipText(l.text)))
			case !strings.HasPrefix(l.text, " "):
				if prevBlank {
					inList = false
				}
			}
			prevBlank = blank || l.heading
		}
	})
	return out, err
}

// eachDoc calls fn with the prose lines of README.md and each docs/*.md.
func eachDoc(root string, fn func(file string, lines []line)) error {
	files, err := markdownFiles(root)
	if err != nil {
		return err
	}
	for _, f := range files {
		lines, err := readLines(filepath.Join(root, f))
		if err != nil {
			return err
		}
		fn(f, prose(lines))
	}
	return nil
}

// eachCommand calls fn with each line of README.md and docs/*.md, fenced
// code included, cut at each "go test" or "go run" it holds.
func eachCommand(root, verb string, fn func(file string, n int, cmd string)) error {
	files, err := markdownFiles(root)
	if err != nil {
		return err
	}
	for _, f := range files {
		lines, err := readLines(filepath.Join(root, f))
		if err != nil {
			return err
		}
		for i, text := range lines {
			for _, part := range strings.Split(text, verb+" ")[1:] {
				cmd := part
				if end := strings.IndexAny(cmd, "`#|"); end >= 0 {
					cmd = cmd[:end]
				}
				fn(f, i+1, strings.TrimSpace(cmd))
			}
		}
	}
	return nil
}

// testFuncs maps each directory under root (relative, with /) to the
// test, benchmark, example and fuzz functions of its _test.go files.
func testFuncs(root string) (map[string][]string, error) {
	funcs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		dir := filepath.ToSlash(rel)
		for _, m := range testFunc.FindAllStringSubmatch(string(data), -1) {
			funcs[dir] = append(funcs[dir], m[1])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	return funcs, nil
}

// packageArgs returns a command's ./ package arguments as directories
// (relative, with /) and whether each ends in "/...".
func packageArgs(cmd string) (dirs []string, recursive []bool) {
	for _, f := range strings.Fields(cmd) {
		if !strings.HasPrefix(f, "./") && f != "." {
			continue
		}
		rec := strings.HasSuffix(f, "/...")
		d := strings.Trim(strings.TrimSuffix(strings.TrimPrefix(f, "./"), "..."), "/")
		if d == "" || d == "." {
			d = "."
		}
		dirs, recursive = append(dirs, d), append(recursive, rec)
	}
	return dirs, recursive
}

func under(dir, parent string) bool {
	return parent == "." || dir == parent || strings.HasPrefix(dir, parent+"/")
}

// MissingTests returns "file:line: ..." for each test a document cites
// that no test file has: a TestXxx name written anywhere, and a go test
// command's -run pattern that matches no test of a package it names (of
// any package under it, for ./dir/...).
func MissingTests(root string) ([]string, error) {
	funcs, err := testFuncs(root)
	if err != nil {
		return nil, err
	}
	all := map[string]bool{}
	for _, fs := range funcs {
		for _, f := range fs {
			all[f] = true
		}
	}
	var out []string
	err = eachDoc(root, func(file string, lines []line) {
		for _, l := range lines {
			for _, name := range testName.FindAllString(l.text, -1) {
				if !all[name] && !strings.HasSuffix(name, "_") {
					out = append(out, fmt.Sprintf("%s:%d: %s: no test file has it", file, l.n, name))
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	err = eachCommand(root, "go test", func(file string, n int, cmd string) {
		m := runFlag.FindStringSubmatch(cmd)
		if m == nil || strings.Contains(cmd, "-bench") {
			return // -run x -bench: no test meant
		}
		pattern := strings.Trim(m[1], `'"`)
		first, _, _ := strings.Cut(pattern, "/")
		re, err := regexp.Compile(first)
		if err != nil {
			out = append(out, fmt.Sprintf("%s:%d: -run %s: %v", file, n, pattern, err))
			return
		}
		dirs, rec := packageArgs(cmd)
		for i, d := range dirs {
			found := false
			for dir, fs := range funcs {
				if (dir == d || rec[i] && under(dir, d)) && slices.ContainsFunc(fs, re.MatchString) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("%s:%d: -run %s matches no test in %s", file, n, pattern, d))
			}
		}
	})
	return out, err
}

// workspaceModules lists the directories go.work uses, but ".".
func workspaceModules(root string) ([]string, error) {
	lines, err := readLines(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, l := range lines {
		d := strings.Trim(strings.TrimSpace(l), "()")
		if strings.HasPrefix(d, "./") {
			mods = append(mods, strings.TrimPrefix(d, "./"))
		}
	}
	return mods, nil
}

// UncoveredModules returns "file:line: ..." for each go test command
// whose ./dir/... argument holds a module of go.work that no argument
// names: ./dir/... stops at a module's boundary, so its tests do not run.
// "./..." is left alone: the documents use it for the core module alone.
func UncoveredModules(root string) ([]string, error) {
	mods, err := workspaceModules(root)
	if err != nil {
		return nil, err
	}
	var out []string
	err = eachCommand(root, "go test", func(file string, n int, cmd string) {
		dirs, rec := packageArgs(cmd)
		for i, d := range dirs {
			if !rec[i] || d == "." {
				continue
			}
			for _, m := range mods {
				if m == d || !under(m, d) {
					continue
				}
				if !slices.ContainsFunc(dirs, func(o string) bool { return o == m || under(m, o) && o != d && under(o, d) }) {
					out = append(out, fmt.Sprintf("%s:%d: ./%s/... leaves out the module %s: add ./%s/...", file, n, d, m, m))
				}
			}
		}
	})
	return out, err
}

// UnknownFlags returns "file:line: ..." for each go run command of a
// program under root that passes a flag the program does not define.
func UnknownFlags(root string) ([]string, error) {
	mods, err := workspaceModules(root)
	if err != nil {
		return nil, err
	}
	var out []string
	err = eachCommand(root, "go run", func(file string, n int, cmd string) {
		fields := strings.Fields(cmd)
		i := slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, "./") })
		if i < 0 {
			return
		}
		// From the root, or from a module's directory ("cd internal/dev/benchmarks && go run ./cmd/compare").
		rel := filepath.FromSlash(strings.TrimPrefix(fields[i], "./"))
		dir := filepath.Join(root, rel)
		for _, m := range mods {
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(root, filepath.FromSlash(m), rel)
			}
		}
		defined, err := programFlags(dir)
		if err != nil {
			out = append(out, fmt.Sprintf("%s:%d: go run %s: %v", file, n, fields[i], err))
			return
		}
		for _, f := range fields[i+1:] {
			name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
			if strings.HasPrefix(f, "-") && name != "" && !defined[name] && name != "h" && name != "help" {
				out = append(out, fmt.Sprintf("%s:%d: go run %s: it defines no flag -%s", file, n, fields[i], name))
			}
		}
	})
	return out, err
}

// programFlags reads the flag names a program's non-test files define.
func programFlags(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	defined := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range flagDef.FindAllStringSubmatch(string(data), -1) {
			defined[m[1]] = true
		}
	}
	return defined, nil
}

// ExampleRows returns "README.md:line: ..." for each row of README's
// examples table (| `go run ./examples/x` | what it shows |) naming a
// figure that the example's code and comments do not hold: a row's "100
// requests per 60 s" must be the example's.
func ExampleRows(root string) ([]string, error) {
	lines, err := readLines(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	var out []string
	for i, l := range lines {
		m := exampleRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(m[1], "./")))
		src, err := sourceText(dir)
		if err != nil {
			out = append(out, fmt.Sprintf("README.md:%d: %s: %v", i+1, m[1], err))
			continue
		}
		for _, num := range numberRe.FindAllString(m[2], -1) {
			if !regexp.MustCompile(`(^|\D)` + num + `(\D|$)`).MatchString(src) {
				out = append(out, fmt.Sprintf("README.md:%d: %s: the row says %s, the example's code and comments do not", i+1, m[1], num))
			}
		}
	}
	return out, nil
}

// sourceText is the non-test Go source of dir, joined.
func sourceText(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no Go files in %s", dir)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b.Write(data)
	}
	return b.String(), nil
}

func clipText(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Package examples_test holds the documentation (README.md and the guides
// under docs/) to the example programs under examples/: every Go block a
// page prints is a marked region of an example, and every example is built
// and run by its own test, so the printed code compiles and runs as
// printed.
//
// A region is the lines between a `// README:begin NAME` (or `# README:begin
// NAME` in YAML) and the next `README:end` comment, compared with the
// page's block after removing the indentation common to all its lines.
package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// block is one fenced code block of a page.
type block struct {
	page string
	lang string
	line int // of the opening fence
	text string
}

// region is one marked region of an example file.
type region struct {
	file, name string
	text       string
}

var (
	fenceOpen   = regexp.MustCompile("^\\s*```\\s*(\\S*)\\s*$")
	regionBegin = regexp.MustCompile(`^\s*(//|#) README:begin (\S+)\s*$`)
	regionEnd   = regexp.MustCompile(`^\s*(//|#) README:end\s*$`)
	testFunc    = regexp.MustCompile(`(?m)^func Test\w*\(t \*testing\.T\)`)
)

// TestREADMECodeIsExampleCode: every ```go block of README.md and of the
// guides under docs/ is a region of an example file, and every region is
// printed in one of them, so neither can change without the other.
func TestREADMECodeIsExampleCode(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	for _, page := range append([]string{"../README.md"}, pages...) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, fencedBlocks(t, strings.TrimPrefix(page, "../"), string(raw))...)
	}
	regions := exampleRegions(t, ".")
	if len(regions) == 0 {
		t.Fatal("no README regions under examples/: the check below would check nothing")
	}
	printed := map[*region]bool{}
	goBlocks := 0
	for _, b := range blocks {
		var match *region
		for _, r := range regions {
			if r.text == b.text {
				match = r
				break
			}
		}
		if match != nil {
			printed[match] = true
		}
		if b.lang != "go" {
			continue
		}
		goBlocks++
		if match == nil {
			t.Errorf("%s:%d: this Go block is no region of an example; put it in a file under examples/ "+
				"between // README:begin NAME and // README:end, with a test that runs it, and print that region:\n%s\nregions:\n%s",
				b.page, b.line, b.text, regionList(regions))
		}
	}
	if goBlocks == 0 {
		t.Error("neither README.md nor docs/ has a ```go block: the check found nothing to check (is the fence still ```go?)")
	}
	for _, r := range regions {
		if !printed[r] {
			t.Errorf("%s: region %q is printed neither in README.md nor in docs/ as it is in the file:\n%s", r.file, r.name, r.text)
		}
	}
}

// TestEveryExampleHasATest: each example program is built by go test ./...
// only through a test of its own, which also runs it.
func TestEveryExampleHasATest(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no example programs under examples/")
	}
	for _, m := range dirs {
		dir := filepath.Dir(m)
		tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		runs := false
		for _, f := range tests {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			runs = runs || testFunc.Match(src)
		}
		if !runs {
			t.Errorf("examples/%s has no test: go test ./... would neither build nor run it", dir)
		}
	}
}

// fencedBlocks returns the fenced code blocks of a Markdown text, each
// without its fences and the indentation common to its lines.
func fencedBlocks(t *testing.T, page, md string) []block {
	t.Helper()
	var out []block
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		start := i
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: a code block that is never closed", page, start+1)
		}
		out = append(out, block{page: page, lang: m[1], line: start + 1, text: dedent(lines[start+1 : i])})
	}
	return out
}

// exampleRegions returns the README regions of every file under root.
func exampleRegions(t *testing.T, root string) []*region {
	t.Helper()
	var out []*region
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var cur *region
		var body []string
		for n, line := range strings.Split(string(src), "\n") {
			switch m := regionBegin.FindStringSubmatch(line); {
			case m != nil:
				if cur != nil {
					t.Errorf("%s:%d: README:begin inside region %q", path, n+1, cur.name)
				}
				cur, body = &region{file: path, name: m[2]}, nil
			case regionEnd.MatchString(line):
				if cur == nil {
					t.Errorf("%s:%d: README:end outside a region", path, n+1)
					continue
				}
				cur.text = dedent(body)
				out = append(out, cur)
				cur = nil
			case cur != nil:
				body = append(body, line)
			}
		}
		if cur != nil {
			t.Errorf("%s: region %q has no README:end", path, cur.name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dedent removes the indentation common to the non-blank lines, trailing
// white space, and blank lines at both ends.
func dedent(lines []string) string {
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ind, false
			continue
		}
		for !strings.HasPrefix(ind, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(strings.TrimPrefix(l, prefix), " \t")
	}
	return strings.Trim(strings.Join(out, "\n"), "\n")
}

func regionList(regions []*region) string {
	var b strings.Builder
	for _, r := range regions {
		b.WriteString("  " + r.file + ": " + r.name + "\n")
	}
	return b.String()
}

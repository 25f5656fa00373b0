// Package doccheck ties the Go code blocks of the project's Markdown to the example tests they
// are copied from, so that go test compiles and runs every documented snippet. A block names its
// source in a marker on the line before it:
//
//	<!-- example: redlock/example_test.go Example_quickStart -->
//
// Its text, spaces aside, must appear in that file, inside functions that the named runner (an
// Example with an output comment, which go test runs, or a Test) calls directly or through other
// functions of the file. It does not run anything itself: the package test of the source does.
package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// Block is a fenced code block of a Markdown file.
type Block struct {
	File string // the Markdown file, as given to Blocks
	Line int    // the line of the opening fence, from 1
	Lang string // the fence's language: "go", "sh", or "" for none

	// From the <!-- example: FILE FUNC --> marker, or <!-- output: FILE --> for a block that
	// shows a program's output; empty without one. FILE is relative to the repository root.
	Source, Runner string
	Output         string

	Text string // the lines between the fences
}

// Blocks returns the fenced code blocks of a Markdown document.
func Blocks(file string, md []byte) []Block {
	var blocks []Block
	var cur *Block
	var marker string // the last line before a fence that is not blank
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == "```" {
				blocks = append(blocks, *cur)
				cur, marker = nil, ""
				continue
			}
			cur.Text += line + "\n"
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			cur = &Block{File: file, Line: n, Lang: strings.TrimSpace(trimmed[3:])}
			parseMarker(cur, marker)
			continue
		}
		if trimmed != "" {
			marker = trimmed
		}
	}
	return blocks
}

// parseMarker fills b's source fields from the line before its fence, when that is a marker.
func parseMarker(b *Block, line string) {
	body, ok := strings.CutPrefix(line, "<!--")
	if !ok {
		return
	}
	body, ok = strings.CutSuffix(body, "-->")
	if !ok {
		return
	}
	fields := strings.Fields(body)
	switch {
	case len(fields) == 3 && fields[0] == "example:":
		b.Source, b.Runner = fields[1], fields[2]
	case len(fields) == 2 && fields[0] == "output:":
		b.Output = fields[1]
	}
}

// A line of code with its spaces collapsed, and where it was.
type line struct {
	text string
	n    int // from 1
}

// normalize drops blank lines and reduces every run of spaces and tabs to one space, so that
// indentation and gofmt's alignment of comments do not count.
func normalize(text string) []line {
	var lines []line
	for i, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines = append(lines, line{strings.Join(f, " "), i + 1})
		}
	}
	return lines
}

// Check returns nil when b's text is code that the file b.Source under root compiles and its
// b.Runner runs; otherwise an error that starts with the block's file and line.
func Check(root string, b Block) error {
	at := fmt.Sprintf("%s:%d", b.File, b.Line)
	if b.Source == "" {
		return fmt.Errorf("%s: a go block without a marker: put <!-- example: FILE FUNC --> on the line before it, FUNC the example that runs it", at)
	}
	src, err := os.ReadFile(filepath.Join(root, b.Source))
	if err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, b.Source, src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	funcs := map[string]*ast.FuncDecl{}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			funcs[fd.Name.Name] = fd
		}
	}
	runner := funcs[b.Runner]
	if runner == nil {
		return fmt.Errorf("%s: %s has no func %s", at, b.Source, b.Runner)
	}
	if !runs(f, runner) {
		return fmt.Errorf("%s: go test does not run %s in %s: name an Example with an output comment, or a Test", at, b.Runner, b.Source)
	}

	want, have := normalize(b.Text), normalize(string(src))
	if len(want) == 0 {
		return fmt.Errorf("%s: an empty go block", at)
	}
	starts, matched := find(want, have)
	if len(starts) == 0 {
		l := want[matched]
		return fmt.Errorf("%s:%d: from this line on, the block is not in %s: %q", b.File, b.Line+l.n, b.Source, l.text)
	}
	reached := reach(runner, funcs)
	var problem error
	for _, s := range starts {
		match := have[s : s+len(want)]
		if problem = inReached(fset, f, reached, match); problem == nil {
			return nil
		}
		problem = fmt.Errorf("%s: the block is %s:%d-%d, %w", at, b.Source, match[0].n, match[len(match)-1].n, problem)
	}
	return problem
}

// runs reports whether go test runs fd: a Test, or an Example with an output comment.
func runs(f *ast.File, fd *ast.FuncDecl) bool {
	name := fd.Name.Name
	if strings.HasPrefix(name, "Test") {
		return fd.Type.Params.NumFields() == 1
	}
	for _, ex := range doc.Examples(f) {
		if "Example"+ex.Name == name {
			return ex.Output != "" || ex.EmptyOutput
		}
	}
	return false
}

// find returns where want occurs in have, line for line; when nowhere, how many of want's
// first lines occur together somewhere.
func find(want, have []line) (starts []int, matched int) {
	for s := range have {
		k := 0
		for k < len(want) && s+k < len(have) && have[s+k].text == want[k].text {
			k++
		}
		if k == len(want) {
			starts = append(starts, s)
		}
		matched = max(matched, k)
	}
	return starts, min(matched, len(want)-1)
}

// reach returns the functions of the file that runner calls or names, itself included,
// directly or through one another.
func reach(runner *ast.FuncDecl, funcs map[string]*ast.FuncDecl) map[*ast.FuncDecl]bool {
	reached := map[*ast.FuncDecl]bool{runner: true}
	queue := []*ast.FuncDecl{runner}
	for len(queue) > 0 {
		fd := queue[0]
		queue = queue[1:]
		ast.Inspect(fd, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if g := funcs[id.Name]; g != nil && !reached[g] {
					reached[g] = true
					queue = append(queue, g)
				}
			}
			return true
		})
	}
	return reached
}

// inReached returns nil when every line of match lies in a function of reached, its doc comment
// included.
func inReached(fset *token.FileSet, f *ast.File, reached map[*ast.FuncDecl]bool, match []line) error {
	for _, l := range match {
		n := l.n
		var in *ast.FuncDecl
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			start := fd.Pos()
			if fd.Doc != nil {
				start = fd.Doc.Pos()
			}
			if fset.Position(start).Line <= n && n <= fset.Position(fd.End()).Line {
				in = fd
				break
			}
		}
		switch {
		case in == nil:
			return fmt.Errorf("and its line %d is in no function", n)
		case !reached[in]:
			return fmt.Errorf("and its line %d is in func %s, which the runner does not call", n, in.Name.Name)
		}
	}
	return nil
}

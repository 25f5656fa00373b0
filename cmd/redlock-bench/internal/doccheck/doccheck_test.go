package doccheck

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/output"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
)

// root is the repository's root, from this package's directory.
const root = "../../../.."

// docs returns the blocks of README.md and docs/*.md, their files named from the root.
func docs(t *testing.T) []Block {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var blocks []Block
	for _, path := range files {
		md, err := os.ReadFile(path)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		blocks = append(blocks, Blocks(rel, md)...)
	}
	return blocks
}

// Every go block of the README and docs/ is code that an example test compiles and runs.
func TestDocsGoBlocks(t *testing.T) {
	checked := 0
	for _, b := range docs(t) {
		if b.Lang != "go" {
			continue
		}
		checked++
		if err := Check(root, b); err != nil {
			t.Error(err)
		}
	}
	require.NotZero(t, checked, "no go block found: wrong root?")
}

// A block marked <!-- output: FILE --> shows lines of the text table that redlock-bench prints
// for the run recorded in FILE (its -o json output), so its figures are that run's.
func TestDocsOutputBlocks(t *testing.T) {
	checked := 0
	for _, b := range docs(t) {
		if b.Output == "" {
			continue
		}
		checked++
		raw, err := os.ReadFile(filepath.Join(root, b.Output))
		require.NoError(t, err)
		var r report.Report
		require.NoError(t, json.Unmarshal(raw, &r), b.Output)
		var text bytes.Buffer
		require.NoError(t, output.Write(&text, &r, "text"))
		want := normalize(b.Text)
		if starts, matched := find(want, normalize(text.String())); len(starts) == 0 {
			t.Errorf("%s:%d: from this line on, the block is not what redlock-bench prints for %s: %q\n%s",
				b.File, b.Line+want[matched].n, b.Output, want[matched].text, text.String())
		}
	}
	require.NotZero(t, checked, "no output block found: the README's sample lost its marker?")
}

func TestBlocks(t *testing.T) {
	md := "text\n" +
		"<!-- example: a/example_test.go ExampleA -->\n" +
		"```go\n" +
		"x := 1\n" +
		"```\n" +
		"\n" +
		"```sh\n" +
		"make test\n" +
		"```\n" +
		"<!-- output: docs/bench/healthy.json -->\n" +
		"\n" +
		"```\n" +
		"row\n" +
		"```\n"
	blocks := Blocks("doc.md", []byte(md))
	require.Len(t, blocks, 3)
	assert.Equal(t, Block{File: "doc.md", Line: 3, Lang: "go", Source: "a/example_test.go", Runner: "ExampleA", Text: "x := 1\n"}, blocks[0])
	assert.Equal(t, Block{File: "doc.md", Line: 7, Lang: "sh", Text: "make test\n"}, blocks[1], "a marker belongs to the next block only")
	assert.Equal(t, Block{File: "doc.md", Line: 12, Output: "docs/bench/healthy.json", Text: "row\n"}, blocks[2])
}

// exampleSource is a file whose examples the cases below point at.
const exampleSource = `package a_test

import "fmt"

// greet is called by ExampleGreet.
func greet(name string) error {
	fmt.Println("hello,", name) // a comment
	return nil
}

func shout(name string) {
	fmt.Println(name + "!")
}

func unused() {
	fmt.Println("nobody calls me")
}

func ExampleGreet() {
	_ = greet("doc")
	shout("doc")
	// Output:
	// hello, doc
	// doc!
}

func ExampleSilent() {
	_ = greet("doc")
}

func TestGreet(t *testing.T) {
	_ = greet("test")
}
`

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte(exampleSource), 0o644))
	block := func(source, runner, text string) Block {
		return Block{File: "doc.md", Line: 10, Lang: "go", Source: source, Runner: runner, Text: text}
	}
	tests := []struct {
		name  string
		block Block
		err   string // "" for none
	}{
		{"a helper the example calls, its own spacing",
			block("a_test.go", "ExampleGreet", "// greet is called by ExampleGreet.\nfunc greet(name string) error {\n\n    fmt.Println(\"hello,\", name)   // a comment\n    return nil\n}\n"), ""},
		{"two functions, the blank line between them left out",
			block("a_test.go", "ExampleGreet", "\treturn nil\n}\nfunc shout(name string) {\n"), ""},
		{"in the example itself", block("a_test.go", "ExampleGreet", "_ = greet(\"doc\")\n"), ""},
		{"a helper a test calls", block("a_test.go", "TestGreet", "return nil\n"), ""},
		{"no marker", block("", "", "x := 1\n"), "doc.md:10: a go block without a marker"},
		{"no such file", block("b_test.go", "ExampleGreet", "x := 1\n"), "doc.md:10: open"},
		{"no such runner", block("a_test.go", "ExampleMissing", "return nil\n"), "doc.md:10: a_test.go has no func ExampleMissing"},
		{"a runner go test does not run", block("a_test.go", "ExampleSilent", "return nil\n"), "go test does not run ExampleSilent"},
		{"a line that differs",
			block("a_test.go", "ExampleGreet", "func greet(name string) error {\n\tfmt.Println(\"hi,\", name)\n}\n"),
			`doc.md:12: from this line on, the block is not in a_test.go: "fmt.Println(\"hi,\", name)"`},
		{"a function the runner does not call",
			block("a_test.go", "ExampleGreet", "fmt.Println(\"nobody calls me\")\n"),
			"doc.md:10: the block is a_test.go:16-16, and its line 16 is in func unused, which the runner does not call"},
		{"outside any function", block("a_test.go", "ExampleGreet", "import \"fmt\"\n"), "and its line 3 is in no function"},
		{"empty", block("a_test.go", "ExampleGreet", "\n"), "doc.md:10: an empty go block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(dir, tt.block)
			if tt.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

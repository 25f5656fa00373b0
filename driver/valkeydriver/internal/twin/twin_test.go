package twin

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture copies the rueidis adapter's files that Generate reads into a
// temp dir, and writes into another what Generate makes of them.
func fixture(t *testing.T) (valkeyDir, rueidisDir string) {
	t.Helper()
	rueidisDir, valkeyDir = t.TempDir(), t.TempDir()
	for _, theirs := range Files {
		src, err := os.ReadFile(filepath.Join("..", "..", "..", "rueidisdriver", theirs))
		if os.IsNotExist(err) {
			t.Skip("the rueidis adapter is not beside this module")
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(rueidisDir, theirs), src, 0o644))
	}
	require.NoError(t, Write(valkeyDir, rueidisDir))
	return valkeyDir, rueidisDir
}

func TestGenerate(t *testing.T) {
	valkeyDir, rueidisDir := fixture(t)
	stale, err := Stale(valkeyDir, rueidisDir)
	require.NoError(t, err)
	assert.Empty(t, stale, "what Write wrote is what Generate makes")

	for name := range Files {
		src, err := os.ReadFile(filepath.Join(valkeyDir, name))
		require.NoError(t, err)
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments)
		require.NoError(t, err, name)
		assert.True(t, ast.IsGenerated(f), "%s is marked generated for the go command and linters", name)
		assert.Contains(t, []string{"valkeydriver", "valkeydriver_test"}, f.Name.Name, name)
		for _, imp := range f.Imports {
			assert.NotContains(t, imp.Path.Value, "rueidis", "%s imports rueidis", name)
		}
		assert.NotContains(t, strings.ToLower(string(src[strings.Index(string(src), "\n"):])), "rueidis",
			"%s names rueidis below its header", name)
	}
}

// TestStale: each way a generated file can go stale is found.
func TestStale(t *testing.T) {
	t.Run("source changed", func(t *testing.T) {
		valkeyDir, rueidisDir := fixture(t)
		f, err := os.OpenFile(filepath.Join(rueidisDir, "pubsub.go"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("\nfunc added() {}\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		stale, err := Stale(valkeyDir, rueidisDir)
		require.NoError(t, err)
		assert.Equal(t, []string{"pubsub.go"}, stale)
	})
	t.Run("generated file edited", func(t *testing.T) {
		valkeyDir, rueidisDir := fixture(t)
		p := filepath.Join(valkeyDir, "valkeydriver.go")
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, append(src, "// a hand edit\n"...), 0o644))
		stale, err := Stale(valkeyDir, rueidisDir)
		require.NoError(t, err)
		assert.Equal(t, []string{"valkeydriver.go"}, stale)
	})
	t.Run("generated file missing or left over", func(t *testing.T) {
		valkeyDir, rueidisDir := fixture(t)
		require.NoError(t, os.Remove(filepath.Join(valkeyDir, "example_test.go")))
		require.NoError(t, os.WriteFile(filepath.Join(valkeyDir, "old.go"), []byte(header("old.go")+"package valkeydriver\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(valkeyDir, "mine.go"), []byte("package valkeydriver\n"), 0o644))
		stale, err := Stale(valkeyDir, rueidisDir)
		require.NoError(t, err)
		assert.Equal(t, []string{"example_test.go", "old.go"}, stale)
	})
	t.Run("no rueidis adapter", func(t *testing.T) {
		_, err := Stale(t.TempDir(), filepath.Join(t.TempDir(), "absent"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
}

package pgfence

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSchemaNamesExist: every Go name schema.sql sends its reader to
// (pgfence.X, X.Method) is one this package declares; it once named four
// that did not exist (fence.CounterSchema, fence.PGCounter, ...).
func TestSchemaNamesExist(t *testing.T) {
	fset := token.NewFileSet()
	declared := map[string]bool{}
	for _, name := range []string{"pgfence.go", "fragment.go"} {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declared[d.Name.Name] = true
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				declared[recv.(*ast.Ident).Name+"."+d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						declared[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							declared[n.Name] = true
						}
					}
				}
			}
		}
	}
	qualified := regexp.MustCompile(`\b([a-z]\w*)\.([A-Z]\w*(?:\.[A-Z]\w*)?)`).FindAllStringSubmatch(schemaSQL, -1)
	methods := regexp.MustCompile(`(?:^|[^.\w])([A-Z]\w*\.[A-Z]\w*)`).FindAllStringSubmatch(schemaSQL, -1)
	require.NotEmpty(t, qualified)
	for _, m := range qualified {
		assert.Equal(t, "pgfence", m[1], "schema.sql names %s.%s, not of this package", m[1], m[2])
		assert.True(t, declared[m[2]], "schema.sql names pgfence.%s, which does not exist", m[2])
	}
	for _, m := range methods {
		assert.True(t, declared[m[1]], "schema.sql names %s, which does not exist", m[1])
	}
}

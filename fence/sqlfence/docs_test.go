package sqlfence_test

import (
	"context"
	"database/sql"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/fence/sqlfence"
)

// recorder is a DB that keeps the statements it runs.
type recorder struct {
	sqlfence.DB
	statements []string
}

func (r *recorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.statements = append(r.statements, query)
	return r.DB.ExecContext(ctx, query, args...)
}

func (r *recorder) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.statements = append(r.statements, query)
	return r.DB.QueryRowContext(ctx, query, args...)
}

// sqlBlocks returns the sql code blocks of a Markdown file, their spaces collapsed.
func sqlBlocks(t *testing.T, path string) []string {
	t.Helper()
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(md), -1) {
		blocks = append(blocks, collapse(m[1]))
	}
	return blocks
}

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestDocsShowStatements: docs/fencing.md shows, for each store, the migration and the
// statements the guard sends for its example, as the guard sends them: the update and, on
// MySQL and SQLite, the read that tells why nothing changed.
func TestDocsShowStatements(t *testing.T) {
	blocks := sqlBlocks(t, "../../docs/fencing.md")
	seen := map[string]bool{}
	for _, d := range databases(t) {
		if seen[d.dialect.String()] {
			continue
		}
		seen[d.dialect.String()] = true
		t.Run(d.name, func(t *testing.T) {
			db, g := inventory(t, d, sqlfence.Guard{})
			g.Table = "inventory"
			_, err := db.ExecContext(t.Context(), "CREATE TABLE inventory (sku VARCHAR(32) PRIMARY KEY, qty INT NOT NULL)")
			require.NoError(t, err)
			migration, err := g.Migration()
			require.NoError(t, err)
			rec := &recorder{DB: db}
			_, err = rec.ExecContext(t.Context(), migration)
			require.NoError(t, err)
			_, err = update(t, d, rec, g, 7, "qty = qty - ?", "sku = ?", 1, "WH-01")
			require.ErrorIs(t, err, sqlfence.ErrNoRow, "an update that changes nothing, to record the read")
			require.NotEmpty(t, rec.statements)
			for _, s := range rec.statements {
				assert.Contains(t, blocks, collapse(s), "docs/fencing.md does not show, as a sql block:\n%s", s)
			}
		})
	}
}

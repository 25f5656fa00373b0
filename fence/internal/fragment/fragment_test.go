package fragment

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCheck: fragments that keep to their parentheses pass, with
// parentheses, quotes, separators and comment marks inside the tokens each
// server reads as strings, names or comments; those that could take the
// guard's statement apart do not. A ? is counted only where the server
// reads a parameter.
func TestCheck(t *testing.T) {
	type ok struct {
		s      string
		params int
	}
	tests := []struct {
		name string
		x    Syntax
		ok   []ok
		bad  []string
	}{
		{"PostgreSQL", PostgreSQL, []ok{
			{"sku = $2", 0},
			{"(sku = $2 OR sku = $3) AND qty > 0", 0},
			{"sku = $1 OR true", 0},
			{"note = ')' AND sku = $2", 0},
			{"note = ';' AND sku = $2", 0},
			{"note = 'it''s (' AND sku = $2", 0},
			{`note = E'\')' AND sku = $2`, 0},
			{`"odd)name" = $2`, 0},
			{`"a""(b" = $2`, 0},
			{"sku = $2 -- trailing ) comment;", 0},
			{"sku = $2 /* ) /* nested ( */ ) */", 0},
			{"note = $$)$$ AND sku = $2", 0},
			{"note = $q$ ( $$ $q$ AND sku = $2", 0},
			{"price$ = $2", 0},
			{"sku = any($2::text[])", 0},
			{"doc ? 'key'", 0}, // jsonb's operator, no parameter
		}, []string{
			"sku = $2) OR (sku = $2",
			"sku = $2)) OR ((true",
			"sku = $2) OR true --",
			"(sku = $2",
			"sku = ')",
			`"sku = $2`,
			"sku = $2 /* ) ",
			"sku = $2 /* /* */ ) ",
			"note = $q$ ) ",
			`note = E'\'' ) OR (true`,
			"sku = $2; DELETE FROM inventory",
		}},
		{"MySQL", MySQL, []ok{
			{"sku = ?", 1},
			{"qty = qty - ?, note = ?", 2},
			{"(sku = ? OR sku = ?) AND qty > 0", 2},
			{"note = ')?' AND sku = ?", 1},
			{`note = "(?;" AND sku = ?`, 1},
			{"`odd)?name` = ?", 1},
			{"`a``(b` = ?", 1},
			{"sku = ? -- ) ?", 1},
			{"sku = ? --", 1},
			{"sku = ? # ) ?", 1},
			{"sku = ? /* ) ? /* */", 1},
			{"qty = qty--1", 0}, // minus minus one: no comment
			{"@rank := @rank + 1", 0},
			{"price$ = ?", 1},
		}, []string{
			"sku = ?) OR (sku = ?",
			"qty = 1 --1) OR (1=1",
			"sku = ? /* ) ",
			"sku = ? /* /* */ ) */ ) OR (true",
			"sku = ? /*! ) OR (1=1 */",
			"sku = ? /*M!100000 ) OR (1=1 */",
			`note = '\' ) OR (1=1 -- '`,
			`note = "\" ) OR (1=1 -- "`,
			"note = 'x",
			"`sku = ?",
			"sku = ?1",
			"sku = ?; DELETE FROM inventory",
		}},
		{"SQLite", SQLite, []ok{
			{"sku = ?", 1},
			{"qty = qty - ?, note = ?", 2},
			{"note = ':x @y $z ?' AND sku = ?", 1},
			{`note = '\' AND sku = ?`, 1}, // no backslash escapes in SQLite
			{`"odd)name" = ?`, 1},
			{"[odd)?name] = ?", 1},
			{"`odd)name` = ?", 1},
			{"sku = ? --) ?", 1},
			{"sku = ? /* ) ? */", 1},
			{"price$ = ?", 1},
		}, []string{
			"sku = ?) OR (sku = ?",
			"[sku = ?",
			"sku = ? /* ) ",
			"sku = ?2",
			"sku = :sku",
			"sku = @sku",
			"sku = $sku",
			"sku = ?; DELETE FROM inventory",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ok := range tt.ok {
				n, err := Check(ok.s, tt.x)
				if assert.NoError(t, err, ok.s) {
					assert.Equal(t, ok.params, n, "parameters in %s", ok.s)
				}
			}
			for _, bad := range tt.bad {
				_, err := Check(bad, tt.x)
				assert.Error(t, err, bad)
			}
		})
	}
}

package pgfence

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCheckFragment: fragments that keep to their parentheses pass, with
// parentheses, quotes and comment marks inside strings, quoted names,
// dollar quotes and comments; those that could take the guard's statement
// apart do not.
func TestCheckFragment(t *testing.T) {
	for _, ok := range []string{
		"sku = $2",
		"(sku = $2 OR sku = $3) AND qty > 0",
		"note = ')' AND sku = $2",
		"note = 'it''s (' AND sku = $2",
		`note = E'\')' AND sku = $2`,
		`"odd)name" = $2`,
		`"a""(b" = $2`,
		"sku = $2 -- trailing ) comment",
		"sku = $2 /* ) /* nested ( */ ) */",
		"note = $$)$$ AND sku = $2",
		"note = $q$ ( $$ $q$ AND sku = $2",
		"price$ = $2",
		"sku = any($2::text[])",
	} {
		assert.NoError(t, checkFragment(ok), ok)
	}
	for _, bad := range []string{
		"sku = $2) OR (sku = $2",
		"sku = $2)) OR ((true",
		"sku = $2) OR true --",
		"(sku = $2",
		"sku = ')",
		`"sku = $2`,
		"sku = $2 /* ) ",
		"note = $q$ ) ",
		`note = E'\'' ) OR (true`,
		"sku = $2; DELETE FROM inventory",
	} {
		assert.Error(t, checkFragment(bad), bad)
	}
}

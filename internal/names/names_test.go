package names

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResource(t *testing.T) {
	for _, ok := range []string{"job", "alloc:WH-01", "{order:42}:sku:1", "ünïcode", strings.Repeat("a", MaxResource)} {
		assert.NoError(t, Resource(ok), ok)
	}
	huge := strings.Repeat("x", 1<<20)
	for _, bad := range []string{"", "a\nb", "nul\x00", "del\x7f", "\xff\xfe", strings.Repeat("a", MaxResource+1), huge, huge + "\n"} {
		err := Resource(bad)
		if assert.Error(t, err, Quote(bad)) {
			assert.Less(t, len(err.Error()), 160, "the error quotes more than a prefix")
		}
	}
}

func TestIdentifier(t *testing.T) {
	assert.NoError(t, Identifier("table", "inventory"))
	assert.NoError(t, Identifier("table", strings.Repeat("t", MaxIdentifier)))
	assert.ErrorContains(t, Identifier("table", strings.Repeat("t", MaxIdentifier+1)), "table")
	assert.ErrorContains(t, Identifier("column", "fen\x00ce"), "control character")
}

func TestQuote(t *testing.T) {
	assert.Equal(t, `"job"`, Quote("job"))
	long := strings.Repeat("é", 100) // 2 bytes each
	q := Quote(long)
	assert.Contains(t, q, "(200 bytes)")
	assert.Contains(t, q, strings.Repeat("é", 32), "cut inside a rune")
}

package nilcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIs(t *testing.T) {
	var p *int
	var m map[string]int
	var f func()
	var e error
	x := 1
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"nil interface", nil, true},
		{"typed nil pointer", p, true},
		{"nil map", m, true},
		{"nil func", f, true},
		{"nil error interface", e, true},
		{"pointer", &x, false},
		{"value", x, false},
		{"struct", struct{}{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, Is(tt.v)) })
	}
}

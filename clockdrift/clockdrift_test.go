package clockdrift

import (
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type vector struct {
	Name       string  `json:"name"`
	TTLms      int64   `json:"ttl_ms"`
	ElapsedMs  int64   `json:"elapsed_ms"`
	Factor     float64 `json:"factor"`
	ConstantMs int64   `json:"constant_ms"`
	ValidityMs int64   `json:"validity_ms"`
}

func TestValidityVectors(t *testing.T) {
	raw, err := os.ReadFile("../testdata/validity.json")
	require.NoError(t, err)
	var vectors []vector
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.NotEmpty(t, vectors)
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			got := Validity(ms(v.TTLms), ms(v.ElapsedMs), v.Factor, ms(v.ConstantMs))
			assert.Equal(t, ms(v.ValidityMs), got)
		})
	}
}

func TestAllowance(t *testing.T) {
	tests := []struct {
		name     string
		ttl      time.Duration
		factor   float64
		constant time.Duration
		want     time.Duration
	}{
		{"defaults", 10 * time.Second, 0.01, 2 * time.Millisecond, 102 * time.Millisecond},
		{"rounds up", 3, 0.5, 0, 2},
		{"negative factor counts as zero", time.Second, -1, time.Millisecond, time.Millisecond},
		{"NaN factor counts as zero", time.Second, math.NaN(), time.Millisecond, time.Millisecond},
		{"negative constant counts as zero", time.Second, 0.01, -time.Second, 10 * time.Millisecond},
		{"negative ttl", -time.Second, 0.01, time.Millisecond, time.Millisecond},
		{"saturates", math.MaxInt64, 2, math.MaxInt64, math.MaxInt64},
		{"infinite factor saturates", time.Second, math.Inf(1), 0, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Allowance(tt.ttl, tt.factor, tt.constant))
		})
	}
}

func TestValidityNegativeElapsed(t *testing.T) {
	assert.Equal(t, Validity(time.Second, 0, 0.01, 0), Validity(time.Second, -time.Hour, 0.01, 0))
}

func TestValiditySaturates(t *testing.T) {
	assert.Equal(t, time.Duration(math.MinInt64), Validity(math.MinInt64+1, math.MaxInt64, 0.01, time.Millisecond))
}

func FuzzValidity(f *testing.F) {
	f.Add(int64(10_000_000_000), int64(120_000_000), int64(1_000_000), 0.01, int64(2_000_000))
	f.Add(int64(1), int64(math.MaxInt64), int64(0), 0.49, int64(math.MaxInt64))
	f.Add(int64(math.MinInt64), int64(math.MinInt64), int64(math.MaxInt64), math.NaN(), int64(-1))
	f.Fuzz(func(t *testing.T, ttl, elapsed, more int64, factor float64, constant int64) {
		v := Validity(time.Duration(ttl), time.Duration(elapsed), factor, time.Duration(constant))
		if v > time.Duration(ttl) {
			t.Fatalf("validity %d above ttl %d", v, ttl)
		}
		if more < 0 {
			more = -(more + 1) // MinInt64 has no positive twin
		}
		later := elapsed + more
		if later < elapsed { // overflowed: the furthest elapsed there is
			later = math.MaxInt64
		}
		if w := Validity(time.Duration(ttl), time.Duration(later), factor, time.Duration(constant)); w > v {
			t.Fatalf("validity grew with elapsed: %d at %d, %d at %d", v, elapsed, w, later)
		}
		if a := Allowance(time.Duration(ttl), factor, time.Duration(constant)); a < 0 {
			t.Fatalf("negative allowance %d", a)
		}
	})
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

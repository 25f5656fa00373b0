package drivers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/cmd/redlock-bench/internal/drivers"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"go-redis", []string{"go-redis"}},
		{"rueidis, valkey-go,", []string{"rueidis", "valkey-go"}},
		{"valkey-go,go-redis-pipelined,valkey-go", []string{"valkey-go", "go-redis-pipelined"}},
	} {
		got, err := drivers.Parse(tt.in)
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
	for _, in := range []string{"", ",", "go-redis,redigo", "GO-REDIS"} {
		_, err := drivers.Parse(in)
		require.ErrorIs(t, err, drivers.ErrUnknown, "%q", in)
		assert.Contains(t, err.Error(), "go-redis, go-redis-pipelined, rueidis, valkey-go", "the error lists what is accepted")
	}
}

func TestNewUnknown(t *testing.T) {
	s, err := drivers.New("redigo")
	require.ErrorIs(t, err, drivers.ErrUnknown)
	assert.Nil(t, s)
	for _, name := range drivers.Names {
		s, err := drivers.New(name)
		require.NoError(t, err)
		assert.Equal(t, name, s.Name())
		s.Close()
	}
}

package childproc

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err, "the port must be bindable")
	require.NoError(t, ln.Close())
}

func TestLogSince(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	require.NoError(t, os.WriteFile(path, []byte("old line\nnew line\n"), 0o600))
	assert.Equal(t, "new line\n", logSince(path, 9, 100))
	assert.Equal(t, "line\n", logSince(path, 9, 5), "at most limit bytes, from the end")
	assert.Contains(t, logSince(filepath.Join(t.TempDir(), "missing"), 0, 10), "no such file")
}

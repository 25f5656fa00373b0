// Package childproc supervises the server processes that tests and benchmarks run
// (redisserver, pgserver, the benchmark CLI): [Start] runs one on a free loopback port, in a
// process group of its own, waits until it is ready, and returns a [Process] to pause, kill and
// stop it. It knows no server's arguments or protocol; its errors carry no package prefix, the
// callers add theirs.
package childproc

import (
	"fmt"
	"io"
	"net"
	"os"
)

// FreePort asks the kernel for a free port on 127.0.0.1. The port is free
// only until someone else takes it, so a server that fails to bind it
// should be started again on another.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// logSince returns what the file at path gained since offset from, at most
// its last limit bytes; a read failure is returned as the text, since the
// caller only puts it in an error message.
func logSince(path string, from, limit int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	from = max(from, fi.Size()-limit)
	b, err := io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

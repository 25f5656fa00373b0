package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// serverInfo sends PING and INFO server over a fresh connection and returns the INFO fields.
// PING comes first because a server still loading its data set answers INFO but not PING.
// It speaks RESP directly so that this package needs no client library. Errors carry no
// package prefix; callers add it.
func serverInfo(ctx context.Context, addr string) (map[string]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	info, err := readInfo(conn)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", addr, err), ctx.Err())
	}
	return info, nil
}

func readInfo(conn net.Conn) (map[string]string, error) {
	if _, err := io.WriteString(conn, "PING\r\nINFO server\r\n"); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if line != "+PONG\r\n" {
		return nil, fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return nil, fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	info := make(map[string]string)
	for _, l := range strings.Split(string(body), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

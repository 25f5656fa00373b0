package redisserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// probe is how this package talks to its servers.
type probe struct {
	// tls dials TLS without verifying the certificate: the probe checks that the server is
	// our child by its pid, and a certificate would prove nothing more.
	tls      bool
	password string // sent with AUTH first when not empty
}

// serverInfo sends PING and INFO server over a fresh connection and returns the INFO fields.
// PING comes first because a server still loading its data set answers INFO but not PING.
// It speaks RESP directly so that this package needs no client library. Errors carry no
// package prefix; callers add it.
func (p probe) serverInfo(ctx context.Context, addr string) (map[string]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if p.tls {
		conn = tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	info, err := readInfo(conn, p.password)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", addr, err), ctx.Err())
	}
	return info, nil
}

func readInfo(conn net.Conn, password string) (map[string]string, error) {
	cmds := "PING\r\nINFO server\r\n"
	if password != "" {
		// As a RESP array, so that any byte of the password is sent as it is.
		cmds = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password) + cmds
	}
	if _, err := io.WriteString(conn, cmds); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line != "+OK\r\n" {
			// Never the reply itself: a server may quote the command it refused.
			return nil, errors.New("AUTH refused")
		}
	}
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

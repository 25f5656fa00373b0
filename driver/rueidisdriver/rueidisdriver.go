// Package rueidisdriver adapts a github.com/redis/rueidis client to the driver
// seam of quorumlock: each master of the lock, or the fence counter's node,
// is one rueidis.Client given to [Conn].
//
// A standalone client (one server) has every capability: push wake-up on a
// dedicated connection, the watchers and Check. A sentinel client has them
// too but names no server, so New cannot find it given twice. A cluster
// client has no [driver.Subscriber] (waiters then wait for the key's expiry
// instead of a push) and says so in its settings; it is one failure domain
// like a go-redis cluster client.
//
// rueidis pipelines every command of a client on one connection per server
// (more with PipelineMultiplex), which is what makes it fast under load.
// A call given up at the lock's node timeout stays in that pipeline; rueidis
// closes a connection whose server stops answering after ConnWriteTimeout.
package rueidisdriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"quorumlock.dev/driver"
)

// Conn adapts c; a nil c gives nil (redlock.New refuses it). The result
// has [driver.Inspector] and [driver.Describer], and [driver.Subscriber]
// unless c is a cluster client.
func Conn(c rueidis.Client) driver.Conn {
	if c == nil {
		return nil
	}
	a := conn{c: c}
	if c.Mode() == rueidis.ClientModeCluster {
		return a
	}
	return subConn{a}
}

// Masters adapts each client with [Conn].
func Masters(clients ...rueidis.Client) []driver.Conn {
	conns := make([]driver.Conn, len(clients))
	for i, c := range clients {
		conns[i] = Conn(c)
	}
	return conns
}

// Unwrap returns the client that c adapts, or nil when c is not of this
// package.
func Unwrap(c driver.Conn) rueidis.Client {
	switch a := c.(type) {
	case conn:
		return a.c
	case subConn:
		return a.c
	}
	return nil
}

type conn struct{ c rueidis.Client }

func (a conn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	cmd := a.c.B().Set().Key(key).Value(value).Nx().PxMilliseconds(ttl.Milliseconds()).Build()
	msg, err := a.c.Do(ctx, cmd).ToMessage()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, convert(err)
	}
	if s, err := msg.ToString(); err != nil || s != "OK" {
		return false, unexpected("SET NX", msg)
	}
	return true, nil
}

func (a conn) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	strs, err := strArgs(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Exec sends EVALSHA, then EVAL when the server answers NOSCRIPT.
	msg, err := lua(s).Exec(ctx, a.c, keys, strs).ToMessage()
	if err != nil {
		return nil, convert(err)
	}
	return value(msg)
}

func (a conn) Info(ctx context.Context, section string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cmd := a.c.B().Info().Build()
	if section != "" {
		cmd = a.c.B().Info().Section(section).Build()
	}
	msg, err := a.c.Do(ctx, cmd).ToMessage()
	if err != nil {
		return "", convert(err)
	}
	s, err := msg.ToString()
	if err != nil {
		return "", unexpected("INFO", msg)
	}
	return s, nil
}

func (a conn) Time(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	msg, err := a.c.Do(ctx, a.c.B().Time().Build()).ToMessage()
	if err != nil {
		return time.Time{}, convert(err)
	}
	parts, err := msg.AsIntSlice()
	if err != nil || len(parts) != 2 {
		return time.Time{}, unexpected("TIME", msg)
	}
	return time.Unix(parts[0], parts[1]*int64(time.Microsecond)), nil
}

func (a conn) ConfigGet(ctx context.Context, parameter string) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg, err := a.c.Do(ctx, a.c.B().ConfigGet().Parameter(parameter).Build()).ToMessage()
	if err != nil {
		return nil, convert(err)
	}
	m, err := msg.AsStrMap() // a map in RESP3, pairs in an array in RESP2
	if err != nil {
		return nil, unexpected("CONFIG GET", msg)
	}
	return m, nil
}

func (a conn) Describe() driver.Description {
	d := driver.Description{Client: a.c}
	nodes := make([]string, 0, 1)
	for addr := range a.c.Nodes() {
		nodes = append(nodes, addr)
	}
	slices.Sort(nodes)
	mode := a.c.Mode()
	switch mode {
	case rueidis.ClientModeCluster:
		d.Cluster = nodes
	case rueidis.ClientModeStandalone:
		if len(nodes) == 1 {
			d.Addr = nodes[0]
		}
	}
	// rueidis sends a write (SET, EVALSHA, EVAL) once: only read-only
	// commands are retried. A cluster client follows redirects, which sends
	// a command again.
	d.NeverRetries = mode != rueidis.ClientModeCluster
	d.Settings = settings(string(mode))
	return d
}

// settings are what a rueidis.Client tells of itself; it does not expose
// its ClientOption, so the options are named where they matter.
func settings(mode string) []driver.Setting {
	s := []driver.Setting{
		{Name: "Mode", Value: mode, Why: "one server or a sentinel-followed master: push wake-up on a dedicated connection"},
		{Name: "retries", Value: "read-only commands only",
			Why: "SET and the lock's scripts are sent once; INFO, TIME and CONFIG GET may be sent again after a network error within the caller's deadline (DisableRetry turns that off)"},
		{Name: "ConnWriteTimeout", Value: "not readable from a rueidis.Client",
			Why: "calls given up at the node timeout stay in the pipeline until the server answers or ConnWriteTimeout closes the connection; set it to a few seconds"},
	}
	if mode == string(rueidis.ClientModeCluster) {
		s[0].Why = "a cluster client: no push wake-up (waiters wait for the key's expiry); INFO and TIME reach one node"
		s[1].Value, s[1].Warn = "redirects and read-only commands", true
		s[1].Why = "a command redirected by MOVED or ASK is sent again, so a failure cannot be told from a command never sent"
	}
	return s
}

// scripts caches a rueidis.Lua per *driver.Script.
var scripts sync.Map

func lua(s *driver.Script) *rueidis.Lua {
	if l, ok := scripts.Load(s); ok {
		return l.(*rueidis.Lua)
	}
	l, _ := scripts.LoadOrStore(s, rueidis.NewLuaScript(s.Source()))
	return l.(*rueidis.Lua)
}

// strArgs formats a script's arguments: strings and Go integers.
func strArgs(args []any) ([]string, error) {
	out := make([]string, len(args))
	for i, arg := range args {
		switch v := arg.(type) {
		case string:
			out[i] = v
		case int:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int8:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int16:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int32:
			out[i] = strconv.FormatInt(int64(v), 10)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case uint:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint8:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint16:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint32:
			out[i] = strconv.FormatUint(uint64(v), 10)
		case uint64:
			out[i] = strconv.FormatUint(v, 10)
		default:
			return nil, fmt.Errorf("%w: script argument %d is a %T, not a string or an integer", ErrArgument, i, arg)
		}
	}
	return out, nil
}

// ErrArgument is a script argument of a type the driver seam does not
// carry; nothing was sent.
var ErrArgument = errors.New("rueidisdriver: bad argument")

// value converts a script's reply to the seam's types.
func value(m rueidis.RedisMessage) (any, error) {
	switch {
	case m.IsInt64():
		return m.AsInt64()
	case m.IsString():
		return m.ToString()
	case m.IsArray():
		elems, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			if e.IsNil() {
				continue
			}
			v, err := value(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, unexpected("a script", m)
}

func unexpected(what string, m rueidis.RedisMessage) error {
	return fmt.Errorf("rueidisdriver: %w from %s: %s", driver.ErrUnexpectedReply, what, m.String())
}

// convert maps rueidis's nil and error replies to the driver's.
func convert(err error) error {
	if err == nil {
		return nil
	}
	if rueidis.IsRedisNil(err) {
		return driver.Nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return &driver.ReplyError{Msg: re.Error()}
	}
	return err
}

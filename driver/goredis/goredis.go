// Package goredis adapts github.com/redis/go-redis/v9 clients to the
// driver seam of quorumlock: the lock's masters through [Masters] to
// redlock.New, the fence counter's node and a guarded store through [Conn]
// to fence.NewRedisCounter and fence.RedisGuard.
//
// A *redis.Client (also one made by NewFailoverClient, for Sentinel) and a
// *redis.ClusterClient have every capability: push wake-up, the watchers
// and Check. A *redis.Ring is refused by New: it moves keys to another
// shard when one is marked down, so it is not one failure domain. Any
// other value with go-redis's Process (an AutoPipeliner, a wrapper) is
// accepted with what it has.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/driver"
)

// Client is what the adapter needs of a go-redis client: *redis.Client,
// *redis.ClusterClient and wrappers of them satisfy it.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Conn adapts c. The result has [driver.Subscriber] when c can subscribe,
// and always [driver.Inspector] and [driver.Describer].
func Conn(c Client) driver.Conn {
	if isNil(c) {
		return nil
	}
	a := conn{c: c}
	if s, ok := c.(subscribable); ok {
		return subConn{a, s}
	}
	return a
}

// isNil reports a nil client, or a nil pointer in a non-nil interface
// (a *redis.Client, a wrapper's).
func isNil(c Client) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Masters adapts each client with [Conn]; a nil client stays nil (New
// refuses it).
func Masters[C Client](clients ...C) []driver.Conn {
	conns := make([]driver.Conn, len(clients))
	for i, c := range clients {
		conns[i] = Conn(c)
	}
	return conns
}

// Unwrap returns the go-redis client that conn adapts, or nil when conn
// is not of this package.
func Unwrap(c driver.Conn) Client {
	switch a := c.(type) {
	case conn:
		return a.c
	case subConn:
		return a.c
	}
	return nil
}

type conn struct{ c Client }

func (a conn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil { // an AutoPipeliner would send it
		return false, err
	}
	err := a.c.Process(ctx, redis.NewStatusCmd(ctx, "set", key, value, "px", boxMS(ttl), "nx"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, convert(err)
}

func (a conn) Eval(ctx context.Context, s *driver.Script, keys []string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := boxed(s)
	v, err := a.eval(ctx, "evalsha", b.sha, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // also when a hook wrapped it
		v, err = a.eval(ctx, "eval", b.src, keys, args)
	}
	if err != nil {
		return nil, convert(err)
	}
	if err := checkReply(v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkReply refuses a script's reply of a type the seam does not carry:
// a RESP3 double, map, set or boolean (from a script that asks for one).
func checkReply(v any) error {
	switch v := v.(type) {
	case int64, string:
		return nil
	case []any:
		for _, e := range v {
			if e == nil {
				continue
			}
			if err := checkReply(e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("goredis: %w: %v (%T) from a script", driver.ErrUnexpectedReply, v, v)
}

// op and script are boxed already: a constant and a cached value cost no
// allocation per call.
func (a conn) eval(ctx context.Context, op, script any, keys []string, args []any) (any, error) {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = op, script, len(keys)
	for i, k := range keys {
		cmdArgs[3+i] = k
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	err := a.c.Process(ctx, cmd)
	return cmd.Val(), err
}

func (a conn) Info(ctx context.Context, section string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	args := []any{"info"}
	if section != "" {
		args = append(args, section)
	}
	cmd := redis.NewStringCmd(ctx, args...)
	err := a.c.Process(ctx, cmd)
	return cmd.Val(), convert(err)
}

func (a conn) Time(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	cmd := redis.NewTimeCmd(ctx, "time")
	err := a.c.Process(ctx, cmd)
	return cmd.Val(), convert(err)
}

func (a conn) ConfigGet(ctx context.Context, parameter string) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := redis.NewMapStringStringCmd(ctx, "config", "get", parameter)
	err := a.c.Process(ctx, cmd)
	return cmd.Val(), convert(err)
}

func (a conn) Describe() driver.Description {
	d := driver.Description{Client: a.c}
	switch c := a.c.(type) {
	case *redis.Ring:
		d.Unsafe = "a *redis.Ring moves keys to another shard when one is marked down, so a second holder can be granted; use one *redis.Client per master"
	case interface{ Options() *redis.Options }:
		o := c.Options()
		if _, _, err := net.SplitHostPort(o.Addr); err == nil {
			// A failover client reports "FailoverClient" whatever its
			// master: it names no server, so it cannot be compared.
			d.Addr = o.Addr
		}
		// NewClient has normalised MaxRetries: 0 is "never retry" (-1 given).
		d.NeverRetries = o.MaxRetries == 0
		d.Settings = settings(o.ContextTimeoutEnabled, o.PoolSize, o.MaxRetries, o.ReadTimeout)
	case interface{ Options() *redis.ClusterOptions }:
		o := c.Options()
		// A cluster client retries on redirects whatever MaxRetries says.
		d.Cluster = append([]string(nil), o.Addrs...)
		d.Settings = settings(o.ContextTimeoutEnabled, o.PoolSize, o.MaxRetries, o.ReadTimeout)
	}
	return d
}

// boxedScript is a script's SHA1 and source as go-redis arguments.
type boxedScript struct{ sha, src any }

// scripts caches boxedScript by *driver.Script: every call of a script
// would otherwise box its SHA1 again.
var scripts sync.Map

func boxed(s *driver.Script) *boxedScript {
	if b, ok := scripts.Load(s); ok {
		return b.(*boxedScript)
	}
	b, _ := scripts.LoadOrStore(s, &boxedScript{sha: s.Hash(), src: s.Source()})
	return b.(*boxedScript)
}

// lastTTL is the last PX argument boxed: a client's locks mostly share a
// TTL, so the box is reused rather than made per call.
var lastTTL atomic.Pointer[boxedTTL]

type boxedTTL struct {
	ms  int64
	arg any
}

func boxMS(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if b := lastTTL.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms: ms, arg: ms}
	lastTTL.Store(b)
	return b.arg
}

// settings are the go-redis options that bear on the lock's bounds.
func settings(ctxTimeout bool, pool, retries int, read time.Duration) []driver.Setting {
	s := []driver.Setting{
		{Name: "ContextTimeoutEnabled", Value: strconv.FormatBool(ctxTimeout),
			Why: "calls given up at the node timeout free their connection at once"},
		{Name: "PoolSize", Value: strconv.Itoa(pool),
			Why: "at most this many connections wait on a master that hangs"},
		{Name: "MaxRetries", Value: strconv.Itoa(retries),
			Why: "a failed command is not sent again: a failure costs no more than one try"},
	}
	if !ctxTimeout {
		s[0].Warn = true
		s[0].Why = fmt.Sprintf("a call given up at the node timeout holds its connection until ReadTimeout (%v): a hung master can tie up the whole pool", read)
	}
	if retries > 0 {
		s[2].Warn = true
		s[2].Why = "a failed command is sent again within the node timeout, so one slow master spends it all and a failure cannot be told from a command never sent"
	}
	return s
}

// convert maps go-redis's nil and error replies to the driver's.
func convert(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return driver.Nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return &driver.ReplyError{Msg: re.Error()}
	}
	return err
}

type subscribable interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

type subConn struct {
	conn
	s subscribable
}

func (a subConn) Subscribe(ctx context.Context) driver.Subscription {
	return pubsub{a.s.Subscribe(ctx)} // no channels yet: no I/O
}

type pubsub struct{ ps *redis.PubSub }

func (p pubsub) Subscribe(ctx context.Context, channels ...string) error {
	return convert(p.ps.Subscribe(ctx, channels...))
}

func (p pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	return convert(p.ps.Unsubscribe(ctx, channels...))
}

func (p pubsub) Ping(ctx context.Context, payload string) error {
	return convert(p.ps.Ping(ctx, payload))
}

func (p pubsub) Receive(ctx context.Context) (driver.Push, error) {
	for {
		// No read deadline: Close closes the connection, which ends the read.
		msg, err := p.ps.ReceiveTimeout(ctx, 0)
		if err != nil {
			return driver.Push{}, convert(err)
		}
		switch m := msg.(type) {
		case *redis.Message:
			return driver.Push{Channel: m.Channel, Payload: m.Payload}, nil
		case *redis.Pong:
			return driver.Push{Pong: true, Payload: m.Payload}, nil
		}
	}
}

func (p pubsub) Close() error { return p.ps.Close() }

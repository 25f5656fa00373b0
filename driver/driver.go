// Package driver is the seam between quorumlock and a Redis client: the
// commands the lock and the fence counter send to one Redis node, and the
// optional capabilities a client may have. An adapter (package goredis for
// github.com/redis/go-redis/v9) implements it for one client library and
// imports nothing of quorumlock but this package.
//
// Required of every node: [Conn]. Optional, each found by a type assertion
// on the Conn: [Subscriber] (push wake-up; without it waiters poll),
// [Inspector] (the restart guard, the clock monitor and Check read it;
// without it they report the node as unknown) and [Describer] (what New
// checks: the address, one failure domain, retries).
//
// Errors: an adapter returns [Nil] for a nil reply and a *[ReplyError] for
// an error reply, wrapped or not; any other error means that no reply came.
// The lock's breaker counts on that difference: a reply, even an error,
// proves the node alive.
package driver

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// Nil is a nil reply: SET NX on a key that exists, a script that returned
// nil.
var Nil = errors.New("driver: nil reply")

// ErrUnexpectedReply is a reply of another type than the command or script
// gives: a server or a proxy that is not what it seems. Callers wrap it.
var ErrUnexpectedReply = errors.New("driver: unexpected reply")

// ReplyError is an error reply from the server ("WRONGTYPE ...",
// "NOSCRIPT ...", "NOAUTH ...").
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

// Replied reports whether err (a call's outcome) came from the server: no
// error, a nil reply or an error reply.
func Replied(err error) bool {
	if err == nil || errors.Is(err, Nil) {
		return true
	}
	var re *ReplyError
	return errors.As(err, &re)
}

// IsReplyError reports an error reply of the server (a *ReplyError,
// wrapped or not).
func IsReplyError(err error) bool {
	var re *ReplyError
	return errors.As(err, &re)
}

// Script is a Lua script and its SHA1.
type Script struct{ src, sha string }

// NewScript returns the script of src.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(h[:])}
}

// Source is the script's Lua text.
func (s *Script) Source() string { return s.src }

// Hash is the script's SHA1, as EVALSHA takes it.
func (s *Script) Hash() string { return s.sha }

// Conn is one Redis node: a master of the lock or the fence counter. Its
// methods are safe for concurrent use and honour ctx: a call whose ctx has
// ended before it is sent returns ctx's error and sends nothing.
type Conn interface {
	// SetNX sets key to value with a time to live of ttl (whole
	// milliseconds, PX) when key does not exist: true when it set it,
	// false and no error when the key exists (of any type).
	SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
	// Eval runs script by its SHA1 (EVALSHA), sending its source
	// (EVAL) when the server does not have it. Each arg is a string or
	// a Go integer (int, int64, uint64, ...). The reply is an int64, a string, a []any of
	// those (a nil element for a nil in the array), or the error Nil.
	Eval(ctx context.Context, script *Script, keys []string, args ...any) (any, error)
}

// Subscriber is a Conn that can open a subscription connection, for push
// wake-up of waiters.
type Subscriber interface {
	// Subscribe opens a subscription on no channel yet (no I/O is needed
	// before its first call).
	Subscribe(ctx context.Context) Subscription
}

// Subscription is one connection in subscribed mode. Its calls come from
// two goroutines: one writes (Subscribe, Unsubscribe, Ping), one reads
// (Receive). A lost connection is reported by the call that meets it and
// made again by the next; the new connection need not have the channels of
// the old one (the lock subscribes them again after a loss).
type Subscription interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	// Ping sends PING with payload; its pong comes back through Receive,
	// after every command sent before it took effect.
	Ping(ctx context.Context, payload string) error
	// Receive waits for the next message or pong. Close ends a Receive
	// that waits; ctx's cancellation may not (go-redis honours only its
	// deadline).
	Receive(ctx context.Context) (Push, error)
	Close() error
}

// Push is what a Subscription receives.
type Push struct {
	Pong    bool   // a pong (Payload is the PING's); else a message
	Channel string // the message's channel
	Payload string
}

// Inspector is a Conn that can be asked what the restart guard, the clock
// monitor and Check read: one server's INFO, TIME and CONFIG GET.
type Inspector interface {
	// Info returns INFO section ("" for the default sections).
	Info(ctx context.Context, section string) (string, error)
	// Time returns the server's clock (TIME).
	Time(ctx context.Context) (time.Time, error)
	// ConfigGet returns CONFIG GET parameter.
	ConfigGet(ctx context.Context, parameter string) (map[string]string, error)
}

// Describer is a Conn that says what New and Check must know of its
// client.
type Describer interface {
	Describe() Description
}

// Describe is what c says of its client; the zero Description when c is
// no Describer.
func Describe(c Conn) Description {
	if d, ok := c.(Describer); ok {
		return d.Describe()
	}
	return Description{}
}

// Label names the client for messages and duplicate checks: its address,
// "cluster a,b,c" for a cluster, its Name, or "" when not known.
func (d Description) Label() string {
	switch {
	case d.Cluster != nil:
		return "cluster " + strings.Join(d.Cluster, ",")
	case d.Addr == "":
		return d.Name
	}
	return d.Addr
}

// Description is what a client says of itself.
type Description struct {
	// Client is the client the Conn wraps, so that one given twice is
	// found; nil when unknown.
	Client any
	// Addr is the host:port of the one server it talks to, which the lock
	// may dial to tell why it does not answer; "" when not known (a
	// failover client follows whichever server is master) or not on a
	// network.
	Addr string
	// Name names a server that has no Addr (an in-process one) in
	// messages; "" for none.
	Name string
	// Cluster lists the seed addresses of a client that spreads keys by
	// hash slot: a script's keys need one hash tag, and INFO and TIME
	// reach one node of several. Nil for a single server.
	Cluster []string
	// Unsafe, when not empty, says why the client is not one failure
	// domain (it moves keys between servers): New refuses it.
	Unsafe string
	// NeverRetries is true when the client never sends a command twice,
	// so that a failed dial (a *net.OpError whose Op is "dial") proves
	// the command was never sent.
	NeverRetries bool
	// Settings are the client's settings that bear on the lock, for
	// Check to report.
	Settings []Setting
}

// Setting is one client setting and what it means for the lock.
type Setting struct {
	Name, Value string
	Warn        bool   // the value puts a bound of the lock at risk
	Why         string // what the value means
}

// Package memredis is an in-memory Redis server behind the driver seam, for
// tests of the lock's own logic in virtual time (testing/synctest): no
// network, keys that expire on the server's clock (time.Now, which a bubble
// makes virtual), the shipped Lua scripts run as they are (gopher-lua, with
// a redis.call of the commands those scripts send), PUBLISH delivered to
// subscriptions, and faults a test switches on: a hung server, a failing
// one, a restart that loses every key.
//
// It is a test double, not a Redis: it knows the commands of the scripts
// of quorumlock and nothing else. A Server made inside a synctest bubble
// must be used only there.
package memredis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"quorumlock.dev/driver"
)

// ErrDown is the error of every call to a server that a test made fail
// ([Server.Fail]): a refused connection, no reply.
var ErrDown = errors.New("memredis: connection refused")

var servers atomic.Int64

// Server is one in-memory Redis server.
type Server struct {
	addr string

	mu      sync.Mutex
	keys    map[string]*entry
	subs    map[*subscription]struct{}
	lua     *lua.LState
	fns     map[*lua.FunctionProto]*lua.LFunction // each script's function in lua, made once
	runID   int64
	started time.Time
	offset  time.Duration // the server clock's step from time.Now
	rate    float64       // how fast the server's clock runs beside time.Now (0: as fast)
	rateAt  time.Time     // when rate was set: the clock runs at rate from there
	hung    chan struct{} // closed by Resume; nil: not hung
	fail    error
	calls   map[string]int // commands and scripts run, by name
}

type kind int

const (
	str kind = iota
	hash
	zset
)

type entry struct {
	kind   kind
	s      string
	h      map[string]string
	fields []string // h's fields in the order they came, as HGETALL lists them
	z      map[string]float64
	expire int64 // unix ms on the server's clock; 0: none
}

// New starts a server.
func New() *Server {
	n := servers.Add(1)
	s := &Server{
		addr:  fmt.Sprintf("mem-%d:6379", n),
		keys:  make(map[string]*entry),
		subs:  make(map[*subscription]struct{}),
		runID: n,
		calls: make(map[string]int),
	}
	s.started = s.now()
	return s
}

// Addr is the server's made-up address: unique, host:port shaped.
func (s *Server) Addr() string { return s.addr }

func (s *Server) now() time.Time {
	t := time.Now()
	if s.rate != 0 {
		t = t.Add(time.Duration(float64(t.Sub(s.rateAt)) * (s.rate - 1)))
	}
	return t.Add(s.offset)
}

func (s *Server) nowMS() int64 { return s.now().UnixMilli() }

// Hang makes every call wait, unanswered, until [Server.Resume] or its
// context ends; calls then in flight are applied when the server resumes,
// like a paused process's queue.
func (s *Server) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung == nil {
		s.hung = make(chan struct{})
	}
}

// Resume ends [Server.Hang].
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
}

// Fail makes every call fail at once with err (nil: healthy again).
func (s *Server) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// Restart empties the server and gives it a new run id, as a restart
// without persistence does; subscriptions lose their channels and report
// the lost connection.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.keys)
	s.runID = servers.Add(1)
	s.started = s.now()
	for sub := range s.subs {
		sub.reset()
	}
}

// StepClock moves the server's clock by d: keys expire on it.
func (s *Server) StepClock(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
}

// SetClockRate makes the server's clock run rate times as fast as
// time.Now from here on (1.01: 1% fast; keys then expire early by that
// much); what it gained or lost so far is kept.
func (s *Server) SetClockRate(rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.offset, s.rate, s.rateAt = 0, rate, time.Now()
	s.offset = now.Sub(s.now())
}

// Snapshot is a copy of a server's keys at one moment, as its AOF file or
// a replica holds them.
type Snapshot struct {
	keys map[string]*entry
}

// Snapshot copies the server's live keys.
func (s *Server) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{keys: make(map[string]*entry, len(s.keys))}
	for k := range s.keys {
		if e := s.lookup(k); e != nil {
			snap.keys[k] = e.clone()
		}
	}
	return snap
}

// RestartFrom restarts the server (a new run id, subscriptions lost) with
// the keys of snap: a restart that replays an AOF missing its last writes,
// or a replica promoted before it had them. Keys keep their expiry times,
// so those that expired meanwhile are gone.
func (s *Server) RestartFrom(snap Snapshot) {
	s.Restart()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range snap.keys {
		s.keys[k] = e.clone()
	}
}

func (e *entry) clone() *entry {
	c := *e
	c.h = maps.Clone(e.h)
	c.fields = slices.Clone(e.fields)
	c.z = maps.Clone(e.z)
	return &c
}

// ExpiresAt is when key expires by time.Now (the server's clock may run
// fast or be stepped): zero for a key without expiry or no key.
func (s *Server) ExpiresAt(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key)
	if e == nil || e.expire == 0 {
		return time.Time{}
	}
	left := time.Duration(e.expire-s.nowMS()) * time.Millisecond
	if s.rate != 0 {
		left = time.Duration(float64(left) / s.rate)
	}
	return time.Now().Add(left)
}

// Calls returns how many times name ran: a command ("set") or a script,
// by the first line of its source.
func (s *Server) Calls(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[name]
}

// Get returns key's string value; ok is false when it does not exist.
func (s *Server) Get(key string) (v string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key)
	if e == nil || e.kind != str {
		return "", false
	}
	return e.s, true
}

// Keys returns the names of the keys that exist, in no order.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.keys {
		if s.lookup(k) != nil {
			out = append(out, k)
		}
	}
	return out
}

// Exists reports whether key exists, of any type.
func (s *Server) Exists(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookup(key) != nil
}

// TTL returns key's time to live; -1 for none, -2 for no key.
func (s *Server) TTL(key string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.pttl(key)) * time.Millisecond
}

// Set stores a string at key for ttl (0: for ever), as another client
// would.
func (s *Server) Set(key, value string, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &entry{kind: str, s: value}
	if ttl > 0 {
		e.expire = s.nowMS() + ttl.Milliseconds()
	}
	s.keys[key] = e
}

// Del deletes key, as another client would.
func (s *Server) Del(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// enter waits out a hang and reports a failure; with nil it holds s.mu. A
// call whose context has ended does nothing, as go-redis sends nothing then.
func (s *Server) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		s.mu.Lock()
		hung, fail := s.hung, s.fail
		if hung == nil && fail == nil {
			return nil
		}
		s.mu.Unlock()
		if fail != nil {
			return fail
		}
		select {
		case <-hung:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lookup returns key's live entry, deleting it when it has expired.
func (s *Server) lookup(key string) *entry {
	e := s.keys[key]
	if e != nil && e.expire != 0 && e.expire <= s.nowMS() {
		delete(s.keys, key)
		return nil
	}
	return e
}

func (s *Server) pttl(key string) int64 {
	e := s.lookup(key)
	switch {
	case e == nil:
		return -2
	case e.expire == 0:
		return -1
	}
	return e.expire - s.nowMS()
}

// Conn is a client of the server, with every optional capability.
func (s *Server) Conn() driver.Conn { return conn{s} }

type conn struct{ s *Server }

var (
	_ driver.Subscriber = conn{}
	_ driver.Inspector  = conn{}
	_ driver.Describer  = conn{}
)

func (c conn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	s := c.s
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	s.calls["set"]++
	if s.lookup(key) != nil {
		return false, nil
	}
	s.keys[key] = &entry{kind: str, s: value, expire: s.nowMS() + ttl.Milliseconds()}
	return true, nil
}

func (c conn) Eval(ctx context.Context, script *driver.Script, keys []string, args ...any) (any, error) {
	s := c.s
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	name, _, _ := strings.Cut(strings.TrimSpace(script.Source()), "\n")
	s.calls[name]++
	return s.run(script.Hash(), script.Source(), keys, args)
}

func (c conn) Info(ctx context.Context, section string) (string, error) {
	s := c.s
	if err := s.enter(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	up := s.now().Sub(s.started)
	return fmt.Sprintf("# Server\r\nredis_version:7.0.0\r\nrun_id:%040d\r\nuptime_in_seconds:%d\r\n"+
		"# Replication\r\nrole:master\r\n", s.runID, int64(up.Seconds())), nil
}

func (c conn) Time(ctx context.Context) (time.Time, error) {
	s := c.s
	if err := s.enter(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.mu.Unlock()
	return s.now(), nil
}

func (c conn) ConfigGet(ctx context.Context, parameter string) (map[string]string, error) {
	s := c.s
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	config := map[string]string{"maxmemory-policy": "noeviction", "appendonly": "yes", "appendfsync": "always",
		"no-appendfsync-on-rewrite": "no", "save": ""}
	v, ok := config[parameter]
	if !ok {
		return map[string]string{}, nil
	}
	return map[string]string{parameter: v}, nil
}

func (c conn) Describe() driver.Description {
	// A name, not an Addr: nothing may dial it (a lock dials a master that
	// does not answer, and a made-up host would reach DNS).
	return driver.Description{Client: c.s, Name: c.s.addr, NeverRetries: true}
}

// run runs a script's source, of SHA1 sha; s.mu is held.
func (s *Server) run(sha, src string, keys []string, args []any) (any, error) {
	if s.lua == nil {
		s.lua = newLua(s)
	}
	L := s.lua
	proto, err := compiled(sha, src)
	if err != nil {
		return nil, &driver.ReplyError{Msg: "ERR Error compiling script: " + err.Error()}
	}
	// A script's main chunk as a function of this state, made once: a
	// closure without upvalues over the state's globals, called anew each
	// time (KEYS and ARGV are set before each call).
	fn := s.fns[proto]
	if fn == nil {
		if s.fns == nil {
			s.fns = make(map[*lua.FunctionProto]*lua.LFunction)
		}
		fn = L.NewFunctionFromProto(proto)
		s.fns[proto] = fn
	}
	// Tables sized to what they hold: NewTable's room for 32 of each kind
	// was a tenth of the simulator's time.
	kt, at := L.CreateTable(len(keys), 0), L.CreateTable(len(args), 0)
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	for _, a := range args {
		at.Append(lua.LString(argString(a)))
	}
	L.SetGlobal("KEYS", kt)
	L.SetGlobal("ARGV", at)
	L.Push(fn)
	if err := L.PCall(0, 1, nil); err != nil {
		msg := err.Error()
		var api *lua.ApiError
		if errors.As(err, &api) {
			if t, ok := api.Object.(*lua.LTable); ok {
				msg = lua.LVAsString(t.RawGetString("err"))
			} else {
				msg = lua.LVAsString(api.Object)
			}
		}
		return nil, &driver.ReplyError{Msg: msg}
	}
	ret := L.Get(-1)
	L.Pop(1)
	return fromLua(ret)
}

// protos are the scripts compiled so far, by SHA1: a compiled script is
// immutable and serves every server (Redis caches by SHA the same way).
// Keyed by the source, each lookup hashed the whole script (a few KB).
var protos sync.Map // string -> *lua.FunctionProto

// compiled returns src, of SHA1 sha, compiled, from the cache when it was
// seen before.
func compiled(sha, src string) (*lua.FunctionProto, error) {
	if p, ok := protos.Load(sha); ok {
		return p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "script")
	if err != nil {
		return nil, err
	}
	p, err := lua.Compile(chunk, "script")
	if err != nil {
		return nil, err
	}
	protos.Store(sha, p)
	return p, nil
}

// argString is an argument as Redis receives it.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	}
	return fmt.Sprint(a)
}

// fromLua converts a script's return value to a reply, as Redis does.
func fromLua(v lua.LValue) (any, error) {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v), nil
	case lua.LString:
		return string(v), nil
	case lua.LBool:
		if v {
			return int64(1), nil
		}
		return nil, driver.Nil
	case *lua.LTable:
		if e := v.RawGetString("err"); e != lua.LNil {
			return nil, &driver.ReplyError{Msg: lua.LVAsString(e)}
		}
		if ok := v.RawGetString("ok"); ok != lua.LNil {
			return lua.LVAsString(ok), nil
		}
		var out []any
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			r, err := fromLua(e)
			switch {
			case errors.Is(err, driver.Nil):
				r = nil
			case err != nil:
				return nil, err
			}
			out = append(out, r)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return nil, driver.Nil
}

// toLua converts a command's reply for redis.call, as Redis does.
func toLua(L *lua.LState, r any) lua.LValue {
	switch r := r.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case status:
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(r))
		return t
	case []any:
		t := L.CreateTable(len(r), 0)
		for _, e := range r {
			t.Append(toLua(L, e))
		}
		return t
	}
	panic(fmt.Sprintf("memredis: reply of type %T", r))
}

type status string

func newLua(s *Server) *lua.LState {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	call := func(protected bool) lua.LGFunction {
		return func(L *lua.LState) int {
			args := make([]string, L.GetTop())
			for i := range args {
				args[i] = luaArg(L.Get(i + 1))
			}
			r, err := s.command(args)
			if err != nil {
				t := L.CreateTable(0, 1)
				t.RawSetString("err", lua.LString(err.Error()))
				if protected {
					L.Push(t)
					return 1
				}
				L.Error(t, 0)
				return 0
			}
			L.Push(toLua(L, r))
			return 1
		}
	}
	rt := L.NewTable()
	rt.RawSetString("call", L.NewFunction(call(false)))
	rt.RawSetString("pcall", L.NewFunction(call(true)))
	L.SetGlobal("redis", rt)
	return L
}

// luaArg is a redis.call argument as Redis converts it: numbers as
// integers when they are whole.
func luaArg(v lua.LValue) string {
	if n, ok := v.(lua.LNumber); ok {
		return formatFloat(float64(n))
	}
	return lua.LVAsString(v)
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

var (
	errWrongType = errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	errNotInt    = errors.New("ERR value is not an integer or out of range")
	errSyntax    = errors.New("ERR syntax error")
)

func init() {
	// Lua 5.0's implicit arg table, which gopher-lua builds for every call
	// of a vararg function, a script's main chunk among them: Redis's Lua
	// has none, and no script of ours reads it.
	lua.CompatVarArg = false
}

// arity is the fewest arguments of each command.
var arity = map[string]int{"time": 0, "get": 1, "set": 2, "del": 1, "exists": 1, "pttl": 1, "pexpire": 2,
	"persist": 1, "publish": 2, "incr": 1, "decr": 1, "hget": 2, "hset": 3, "hdel": 2, "hgetall": 1, "zadd": 3,
	"zrem": 2, "zrange": 3, "zrangebyscore": 3, "zremrangebyscore": 3, "zscore": 2}

// lower is strings.ToLower for a command's name, without allocating for
// the names arity knows.
func lower(s string) string {
	var b [16]byte
	if len(s) > len(b) {
		return strings.ToLower(s)
	}
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	if name, ok := names[string(b[:len(s)])]; ok {
		return name
	}
	return strings.ToLower(s)
}

// names maps each name arity knows to itself.
var names = func() map[string]string {
	m := make(map[string]string, len(arity))
	for name := range arity {
		m[name] = name
	}
	return m
}()

// command runs one command of a script; s.mu is held.
func (s *Server) command(args []string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("ERR wrong number of arguments")
	}
	name := lower(args[0])
	a := args[1:]
	if len(a) < arity[name] {
		return nil, fmt.Errorf("ERR wrong number of arguments for '%s' command", name)
	}
	switch name {
	case "time":
		now := s.now()
		return []any{strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond() / 1000)}, nil
	case "get":
		e := s.lookup(a[0])
		if e == nil {
			return nil, nil
		}
		if e.kind != str {
			return nil, errWrongType
		}
		return e.s, nil
	case "set":
		return s.set(a)
	case "del", "exists":
		n := int64(0)
		for _, k := range a {
			if s.lookup(k) != nil {
				n++
				if name == "del" {
					delete(s.keys, k)
				}
			}
		}
		return n, nil
	case "pttl":
		return s.pttl(a[0]), nil
	case "pexpire":
		ms, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil {
			return nil, errNotInt
		}
		e := s.lookup(a[0])
		if e == nil {
			return int64(0), nil
		}
		if ms <= 0 {
			delete(s.keys, a[0])
		} else {
			e.expire = s.nowMS() + ms
		}
		return int64(1), nil
	case "persist":
		e := s.lookup(a[0])
		if e == nil || e.expire == 0 {
			return int64(0), nil
		}
		e.expire = 0
		return int64(1), nil
	case "publish":
		n := int64(0)
		for sub := range s.subs {
			if sub.deliver(a[0], a[1]) {
				n++
			}
		}
		return n, nil
	case "incr", "decr":
		e := s.lookup(a[0])
		cur := int64(0)
		if e != nil {
			if e.kind != str {
				return nil, errWrongType
			}
			v, err := strconv.ParseInt(e.s, 10, 64)
			if err != nil {
				return nil, errNotInt
			}
			cur = v
		} else {
			e = &entry{kind: str}
			s.keys[a[0]] = e
		}
		if name == "incr" {
			cur++
		} else {
			cur--
		}
		e.s = strconv.FormatInt(cur, 10)
		return cur, nil
	case "hget", "hset", "hdel", "hgetall":
		return s.hashCommand(name, a)
	}
	return s.zsetCommand(name, a)
}

func (s *Server) set(a []string) (any, error) {
	key, value := a[0], a[1]
	var ms int64
	nx := false
	for i := 2; i < len(a); i++ {
		switch strings.ToLower(a[i]) {
		case "px", "ex":
			if i+1 >= len(a) {
				return nil, errSyntax
			}
			v, err := strconv.ParseInt(a[i+1], 10, 64)
			if err != nil || v <= 0 {
				return nil, errors.New("ERR invalid expire time in 'set' command")
			}
			if strings.EqualFold(a[i], "ex") {
				v *= 1000
			}
			ms = v
			i++
		case "nx":
			nx = true
		default:
			return nil, errSyntax
		}
	}
	if nx && s.lookup(key) != nil {
		return nil, nil
	}
	e := &entry{kind: str, s: value}
	if ms > 0 {
		e.expire = s.nowMS() + ms
	}
	s.keys[key] = e
	return status("OK"), nil
}

func (s *Server) hashCommand(name string, a []string) (any, error) {
	e := s.lookup(a[0])
	if e != nil && e.kind != hash {
		return nil, errWrongType
	}
	switch name {
	case "hget":
		if e == nil {
			return nil, nil
		}
		v, ok := e.h[a[1]]
		if !ok {
			return nil, nil
		}
		return v, nil
	case "hset":
		if len(a)%2 != 1 {
			return nil, errors.New("ERR wrong number of arguments for 'hset' command")
		}
		if e == nil {
			e = &entry{kind: hash, h: make(map[string]string)}
			s.keys[a[0]] = e
		}
		n := int64(0)
		for i := 1; i < len(a); i += 2 {
			if _, ok := e.h[a[i]]; !ok {
				n++
				e.fields = append(e.fields, a[i])
			}
			e.h[a[i]] = a[i+1]
		}
		return n, nil
	case "hdel":
		n := int64(0)
		if e == nil {
			return n, nil
		}
		for _, f := range a[1:] {
			if _, ok := e.h[f]; ok {
				n++
				delete(e.h, f)
				e.fields = slices.DeleteFunc(e.fields, func(g string) bool { return g == f })
			}
		}
		if len(e.h) == 0 {
			delete(s.keys, a[0])
		}
		return n, nil
	}
	out := []any{}
	if e != nil {
		for _, f := range e.fields {
			out = append(out, f, e.h[f])
		}
	}
	return out, nil
}

func (s *Server) zsetCommand(name string, a []string) (any, error) {
	e := s.lookup(a[0])
	if e != nil && e.kind != zset {
		return nil, errWrongType
	}
	switch name {
	case "zadd":
		if len(a)%2 != 1 {
			return nil, errSyntax
		}
		if e == nil {
			e = &entry{kind: zset, z: make(map[string]float64)}
			s.keys[a[0]] = e
		}
		n := int64(0)
		for i := 1; i < len(a); i += 2 {
			score, err := strconv.ParseFloat(a[i], 64)
			if err != nil {
				return nil, errors.New("ERR value is not a valid float")
			}
			if _, ok := e.z[a[i+1]]; !ok {
				n++
			}
			e.z[a[i+1]] = score
		}
		return n, nil
	case "zrem":
		n := int64(0)
		if e != nil {
			for _, m := range a[1:] {
				if _, ok := e.z[m]; ok {
					delete(e.z, m)
					n++
				}
			}
			s.dropEmpty(a[0], e)
		}
		return n, nil
	case "zscore":
		if e == nil {
			return nil, nil
		}
		v, ok := e.z[a[1]]
		if !ok {
			return nil, nil
		}
		return formatFloat(v), nil
	case "zrange":
		start, err1 := strconv.Atoi(a[1])
		stop, err2 := strconv.Atoi(a[2])
		if err1 != nil || err2 != nil {
			return nil, errNotInt
		}
		scores := len(a) > 3 && strings.EqualFold(a[3], "withscores")
		all := sorted(e)
		n := len(all)
		if start < 0 {
			start = max(n+start, 0)
		}
		if stop < 0 {
			stop = n + stop
		}
		stop = min(stop, n-1)
		out := []any{}
		for i := start; i <= stop; i++ {
			out = append(out, all[i].m)
			if scores {
				out = append(out, formatFloat(all[i].s))
			}
		}
		return out, nil
	case "zrangebyscore", "zremrangebyscore":
		lo, err1 := bound(a[1])
		hi, err2 := bound(a[2])
		if err1 != nil || err2 != nil {
			return nil, errors.New("ERR min or max is not a float")
		}
		var hit []string
		for _, m := range sorted(e) {
			if lo.below(m.s) && hi.above(m.s) {
				hit = append(hit, m.m)
			}
		}
		if name == "zremrangebyscore" {
			for _, m := range hit {
				delete(e.z, m)
			}
			if e != nil {
				s.dropEmpty(a[0], e)
			}
			return int64(len(hit)), nil
		}
		out := make([]any, len(hit))
		for i, m := range hit {
			out[i] = m
		}
		return out, nil
	}
	return nil, fmt.Errorf("ERR unknown command '%s' (memredis knows only the scripts' commands)", name)
}

func (s *Server) dropEmpty(key string, e *entry) {
	if len(e.z) == 0 && e.kind == zset {
		delete(s.keys, key)
	}
}

type member struct {
	m string
	s float64
}

func sorted(e *entry) []member {
	if e == nil {
		return nil
	}
	out := make([]member, 0, len(e.z))
	for m, s := range e.z {
		out = append(out, member{m, s})
	}
	slices.SortFunc(out, func(a, b member) int {
		if a.s != b.s {
			if a.s < b.s {
				return -1
			}
			return 1
		}
		return strings.Compare(a.m, b.m)
	})
	return out
}

// scoreBound is one end of a score range: "-inf", "+inf", "1.5", "(1.5".
type scoreBound struct {
	v    float64
	open bool
}

func bound(s string) (scoreBound, error) {
	b := scoreBound{}
	if strings.HasPrefix(s, "(") {
		b.open, s = true, s[1:]
	}
	switch strings.ToLower(s) {
	case "-inf":
		b.v = math.Inf(-1)
		return b, nil
	case "+inf", "inf":
		b.v = math.Inf(1)
		return b, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	b.v = v
	return b, err
}

func (b scoreBound) below(x float64) bool { return x > b.v || (!b.open && x == b.v) }
func (b scoreBound) above(x float64) bool { return x < b.v || (!b.open && x == b.v) }

package fence

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"quorumlock.dev/driver"
	"quorumlock.dev/internal/bounded"
	"quorumlock.dev/internal/nilcheck"
)

var (
	//go:embed scripts/guardset.lua
	guardSetLua    string
	guardSetScript = driver.NewScript(guardSetLua)

	// HGETALL through a script: the driver seam runs scripts, not commands.
	hashGetScript = driver.NewScript("return redis.call('HGETALL', KEYS[1])")
)

// RedisGuard stores values in Redis only for writers whose fence is not
// older than the one stored with the value, checked and written in one
// script on the server, so a late write is checked when it lands. A guarded
// key is a hash {v: value, f: fence}; write it only through [RedisGuard.Set].
// The zero value compares with [AtLeast]; it is safe for concurrent use.
type RedisGuard struct {
	// Compare says which fences are admitted against the stored one.
	Compare Comparison
	// OnReject, when not nil, is called once for each write the guard
	// refuses, before Set returns; it must be safe for concurrent use. A
	// metrics adapter counts rejections with it.
	OnReject func()
}

// Set stores value, and fence with it, at key if fence passes the guard's
// comparison with the stored one (a missing key admits any). ttl > 0 expires
// the key, fence and all; 0 keeps it for ever. A refused write wraps
// [ErrFenceRejected], is counted in [Rejected] and is told to OnReject; bad
// input gives [ErrInvalidArgument]. Edge cases (expiry, foreign keys):
// docs/fencing.md.
func (g RedisGuard) Set(ctx context.Context, node driver.Conn, key, value string, fence uint64, ttl time.Duration) error {
	switch {
	case nilcheck.Is(node):
		return fmt.Errorf("%w: nil node", ErrInvalidArgument)
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case fence == 0:
		// 0 is what Get reports for a key without a value; no counter mints it.
		return fmt.Errorf("%w: fence 0", ErrInvalidArgument)
	case ttl < 0 || (ttl > 0 && ttl < time.Millisecond):
		return fmt.Errorf("%w: ttl %v is neither 0 nor at least 1ms", ErrInvalidArgument, ttl)
	case g.Compare != AtLeast && g.Compare != Newer:
		return fmt.Errorf("%w: unknown comparison %d", ErrInvalidArgument, g.Compare)
	}
	equal := 0
	if g.Compare == AtLeast {
		equal = 1
	}
	res, err := bounded.Call(ctx, 0, guardSet, guardSetCall{node, key, value, fence, ttl.Milliseconds(), equal})
	if err != nil {
		return fmt.Errorf("fence: set %s: %w", key, err)
	}
	switch res := res.(type) {
	case int64:
		return nil
	case string:
		return fmt.Errorf("%w: %s holds fence %s, offered %d", reject(g.OnReject), key, res, fence)
	default:
		return fmt.Errorf("fence: set %s: unexpected reply %v (%T)", key, res, res)
	}
}

type guardSetCall struct {
	node        driver.Conn
	key, value  string
	fence       uint64
	ttlMs       int64
	admitsEqual int
}

func guardSet(ctx context.Context, a guardSetCall) (any, error) {
	return a.node.Eval(ctx, guardSetScript, []string{a.key}, a.value, a.fence, a.ttlMs, int64(a.admitsEqual))
}

// Get returns the value stored at key and the fence it was stored with.
// A key that does not exist gives ("", 0, nil): fence 0 is never stored, so
// it tells "no value" apart from an empty value without a sentinel error,
// and a caller that writes next needs no special case. A key that holds
// another type, or a hash that is not a guarded value, gives an error. Get
// waits at most until ctx ends.
func (g RedisGuard) Get(ctx context.Context, node driver.Conn, key string) (value string, fence uint64, err error) {
	if nilcheck.Is(node) {
		return "", 0, fmt.Errorf("%w: nil node", ErrInvalidArgument)
	}
	// HGETALL rather than HMGET v f: a hash with neither field must read as
	// foreign, not as missing.
	fields, err := bounded.Call(ctx, 0, hashGet, hashGetCall{node, key})
	if err != nil {
		return "", 0, fmt.Errorf("fence: get %s: %w", key, err)
	}
	if len(fields) == 0 {
		return "", 0, nil
	}
	v, vok := fields["v"]
	f, fok := fields["f"]
	if !vok || !fok {
		return "", 0, fmt.Errorf("fence: get %s: not a guarded value (hash fields v and f)", key)
	}
	n, err := strconv.ParseUint(f, 10, 64)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("fence: get %s: stored fence %q is not a positive integer", key, f)
	}
	return v, n, nil
}

type hashGetCall struct {
	node driver.Conn
	key  string
}

func hashGet(ctx context.Context, a hashGetCall) (map[string]string, error) {
	v, err := a.node.Eval(ctx, hashGetScript, []string{a.key})
	if err != nil {
		return nil, err
	}
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("unexpected reply %v (%T)", v, v)
	}
	fields := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, kok := flat[i].(string)
		f, fok := flat[i+1].(string)
		if !kok || !fok {
			return nil, fmt.Errorf("unexpected reply %v", flat)
		}
		fields[k] = f
	}
	return fields, nil
}

// Package drivers makes the masters of a benchmark run through one of the Go Redis clients
// quorumlock adapts: plain go-redis clients, go-redis's AutoPipeliner, rueidis or valkey-go,
// each configured as the run measures it. It owns the clients it makes and closes them; it
// knows nothing of the lock.
package drivers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/driver/rueidisdriver"
	"quorumlock.dev/driver/valkeydriver"
)

// The names -driver accepts.
const (
	GoRedis          = "go-redis"           // one *redis.Client per server, a pool of connections
	GoRedisPipelined = "go-redis-pipelined" // that client's AutoPipeline(): calls batched on one connection
	Rueidis          = "rueidis"            // a rueidis.Client per server, which pipelines every call
	Valkey           = "valkey-go"          // the same with valkey-go, rueidis's fork
)

// Names lists the drivers in the order a help text offers them; Default is the one a run uses
// unless told otherwise.
var Names = []string{GoRedis, GoRedisPipelined, Rueidis, Valkey}

// Default is the driver of a run that names none.
const Default = GoRedis

// ErrUnknown reports a driver name that is not one of [Names].
var ErrUnknown = errors.New("drivers: unknown driver")

// FlushDelay is how long a rueidis or valkey-go pipeline waits after a write, while other calls
// are waiting, for more of them to join the next write (ClientOption.MaxFlushDelay; a lone
// caller is never delayed). With it and one connection per server, many goroutines' calls go out
// in few writes, and the client and the servers pay a system call per batch instead of per call:
// without them rueidis made half the AutoPipeliner's cycles at c=64. docs/drivers.md has the
// measurements that chose 100 µs.
const FlushDelay = 100 * time.Microsecond

// Parse reads a comma-separated list of driver names: each once, in the order given. An empty
// list or an unknown name is an error wrapping [ErrUnknown] that names the accepted ones.
func Parse(list string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(list, ",") {
		name := strings.TrimSpace(part)
		if name == "" {
			continue
		}
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("%w %q (want one or more of %s)", ErrUnknown, name, strings.Join(Names, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: none named (want one or more of %s)", ErrUnknown, strings.Join(Names, ", "))
	}
	return out, nil
}

// Set makes connections through one driver and closes them all in Close. It is not safe for
// concurrent use.
type Set struct {
	name    string
	closers []func()
}

// New returns a Set for the driver name, one of [Names].
func New(name string) (*Set, error) {
	if !slices.Contains(Names, name) {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknown, name, strings.Join(Names, ", "))
	}
	return &Set{name: name}, nil
}

// Name is the Set's driver.
func (s *Set) Name() string { return s.name }

// Conn returns a connection to the server o describes (its address, user, password, database
// and TLS; go-redis's options, whatever the driver). poolSize is the go-redis pool, sized by the
// caller so that it is not what limits the run; the pipelining drivers need no pool.
func (s *Set) Conn(o *redis.Options, poolSize int) (driver.Conn, error) {
	switch s.name {
	case GoRedis, GoRedisPipelined:
		o.PoolSize = poolSize
		c := redis.NewClient(o)
		if s.name == GoRedis {
			s.closers = append(s.closers, func() { _ = c.Close() })
			return goredis.Conn(c), nil
		}
		ap, err := c.AutoPipeline()
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("drivers: %s: %w", s.name, err)
		}
		// The AutoPipeliner first: its Close waits for its batches, which need the client.
		s.closers = append(s.closers, func() { _ = ap.Close(); _ = c.Close() })
		return goredis.Conn(ap), nil
	case Rueidis:
		c, err := rueidis.NewClient(rueidisOption(o))
		if c == nil {
			return nil, fmt.Errorf("drivers: %s %s: %w", s.name, o.Addr, err)
		}
		s.closers = append(s.closers, c.Close)
		return rueidisdriver.Conn(c), nil
	case Valkey:
		c, err := valkey.NewClient(valkeyOption(o))
		if c == nil {
			return nil, fmt.Errorf("drivers: %s %s: %w", s.name, o.Addr, err)
		}
		s.closers = append(s.closers, c.Close)
		return valkeydriver.Conn(c), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknown, s.name)
}

// Close closes every client the Set made, the last made first.
func (s *Set) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// rueidisOption is o for rueidis: one server (a client is made even while it refuses
// connections, as go-redis's are, so the dead scenario can run), no client-side cache (the
// lock reads nothing it could cache), one pipelined connection (PipelineMultiplex -1 means 2⁰;
// the default on 2 CPUs is 2¹) and [FlushDelay].
func rueidisOption(o *redis.Options) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{o.Addr},
		Username:          o.Username,
		Password:          o.Password,
		SelectDB:          o.DB,
		TLSConfig:         o.TLSConfig,
		ForceSingleClient: true,
		DisableCache:      true,
		PipelineMultiplex: -1,
		MaxFlushDelay:     FlushDelay,
	}
}

// valkeyOption is [rueidisOption] for valkey-go.
func valkeyOption(o *redis.Options) valkey.ClientOption {
	return valkey.ClientOption{
		InitAddress:       []string{o.Addr},
		Username:          o.Username,
		Password:          o.Password,
		SelectDB:          o.DB,
		TLSConfig:         o.TLSConfig,
		ForceSingleClient: true,
		DisableCache:      true,
		PipelineMultiplex: -1,
		MaxFlushDelay:     FlushDelay,
	}
}

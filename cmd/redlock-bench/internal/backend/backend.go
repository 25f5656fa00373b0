// Package backend provides the servers of a benchmark run: in-process
// miniredis servers, redis-server processes it starts on loopback ports and
// stops, or existing servers, whose keys it removes afterwards.
package backend

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"quorumlock.dev/cmd/redlock-bench/internal/embeddedredis"
	"quorumlock.dev/cmd/redlock-bench/internal/report"
	"quorumlock.dev/internal/harness/childproc"
	"quorumlock.dev/internal/harness/redisserver"
)

// The backend kinds of [Config].
const (
	kindEmbedded    = "embedded"
	kindRedisServer = "redis-server"
	kindAddrs       = "addrs"
)

const (
	maxMasters = 16
	// checkTimeout bounds the PING and INFO of one addrs server in Open: long enough for
	// a server across a LAN, short enough that a dead address fails the run at once.
	checkTimeout = 2 * time.Second
	// cleanupTimeout bounds each command of the key cleanup in Close.
	cleanupTimeout = 5 * time.Second
	// scanCount and delBatch bound the keys held in memory and sent in one DEL, so that
	// cleaning up a long run neither blocks a shared server nor builds a huge command.
	scanCount = 1000
	delBatch  = 500
	// miniredisModule is the module path whose version names the embedded servers.
	miniredisModule = "github.com/alicebob/miniredis/v2"
)

// ErrConfig reports a [Config] that cannot work; it is found before any server is
// started or contacted, so that a typo costs no time.
var ErrConfig = errors.New("backend: bad backend configuration")

// ErrUnreachable reports an addrs server that did not answer PING. The error's message names
// the server's role and address on one line, since it is what the user of the CLI sees.
var ErrUnreachable = errors.New("backend: server unreachable")

// Config says where the servers of a run come from. Kind is "embedded" (the default),
// "redis-server" or "addrs"; the other fields but Masters are for Kind "addrs" only.
type Config struct {
	// Kind chooses the servers: "embedded" runs miniredis in this process, which needs
	// nothing installed but measures miniredis rather than Redis; "redis-server" starts real
	// servers on loopback ports; "addrs" uses servers that already run.
	Kind string
	// Masters is how many masters the run needs, 1 to 16.
	Masters int
	// Addrs are the masters of Kind "addrs"; the first Masters are used. Each is host:port
	// or a URL that redis.ParseURL reads: redis://[user[:password]@]host:port[/db], or
	// rediss:// for TLS.
	Addrs []string
	// SingleAddr is the server of the single-instance mode; "" means Addrs[0].
	SingleAddr string
	// FenceAddr is the server of the fence counter; "" means the run has no fence.
	FenceAddr string
	// Password authenticates to every server whose URL carries none. A caller takes it from
	// somewhere other than the command line, where any user of the machine could read it.
	Password string
	// TLSCAFile is a PEM file of the CAs that rediss:// servers' certificates must chain to;
	// "" means the system's roots.
	TLSCAFile string
}

// Env is an opened backend: the addresses a run sends its traffic to. Close it when the run
// ends.
type Env struct {
	// Backend is the kind the servers came from.
	Backend string
	// InProcess reports servers that run in this process (Kind "embedded"):
	// the process's allocations and CPU are theirs as well as the client's.
	InProcess bool
	// Masters holds exactly Config.Masters distinct addresses.
	Masters []string
	// Single is the server of the single-instance mode. Except for Kind "addrs" it is not
	// one of the masters, so that the two modes do not share a server's CPU.
	Single string
	// Fence is the server of the fence counter, separate from the masters except for Kind
	// "addrs"; "" when an addrs run has no fence.
	Fence string
	// Servers lists every role of every server, masters first, for the report.
	Servers []report.ServerInfo
	// Prefix is unique to the run; every key the run writes is lock:<Prefix>:... or
	// fence:<Prefix>:..., which lets Close remove them from servers that others use.
	Prefix string

	minis   []*embeddedredis.Server
	servers []*redisserver.Server
	// For Kind "addrs": the client options of each server by host:port, the host:port of
	// each entry of Servers, and the passwords that no message may carry.
	opts    map[string]*redis.Options
	hosts   []string
	secrets []string

	mu     sync.Mutex
	closed bool
}

// Open starts or checks the servers bc describes. Embedded servers run in this process;
// redis-server processes listen on free loopback ports without persistence and are started
// in parallel; addrs servers must answer PING within a short timeout, or Open fails with an
// error wrapping [ErrUnreachable]. A missing redis-server yields an error wrapping
// [redisserver.ErrNotInstalled]. On failure Open stops whatever it started.
func Open(ctx context.Context, bc Config) (*Env, error) {
	kind, addrs, err := validateBackend(bc)
	if err != nil {
		return nil, err
	}
	prefix, err := newPrefix()
	if err != nil {
		return nil, err
	}
	e := &Env{Backend: kind, Prefix: prefix}
	switch kind {
	case kindEmbedded:
		e.InProcess = true
		err = e.openEmbedded(ctx, bc.Masters)
	case kindRedisServer:
		err = e.openRedisServer(ctx, bc.Masters)
	case kindAddrs:
		err = e.openAddrs(ctx, addrs)
	}
	if err != nil {
		// Nothing to clean up on addrs servers yet: the run has written no keys.
		_ = e.stopServers()
		return nil, err
	}
	return e, nil
}

// validateBackend returns the effective kind and, for Kind "addrs", the masters, then the
// single server, then the fence; or an error wrapping ErrConfig. Nothing it prints carries a
// password.
func validateBackend(bc Config) (string, []*server, error) {
	kind := bc.Kind
	if kind == "" {
		kind = kindEmbedded
	}
	if bc.Masters < 1 || bc.Masters > maxMasters {
		return "", nil, fmt.Errorf("%w: %d masters, want 1 to %d", ErrConfig, bc.Masters, maxMasters)
	}
	switch kind {
	case kindEmbedded, kindRedisServer:
		// Addresses given with another kind are most likely a forgotten kind; ignoring
		// them would benchmark servers the user did not mean.
		if len(bc.Addrs) > 0 || bc.SingleAddr != "" || bc.FenceAddr != "" || bc.Password != "" || bc.TLSCAFile != "" {
			return "", nil, fmt.Errorf("%w: addresses or credentials given for backend %q; they need backend %q", ErrConfig, kind, kindAddrs)
		}
		return kind, nil, nil
	case kindAddrs:
	default:
		return "", nil, fmt.Errorf("%w: unknown backend %q, want %s, %s or %s",
			ErrConfig, bc.Kind, kindEmbedded, kindRedisServer, kindAddrs)
	}
	if len(bc.Addrs) < bc.Masters {
		return "", nil, fmt.Errorf("%w: %d masters need %d addresses, got %d", ErrConfig, bc.Masters, bc.Masters, len(bc.Addrs))
	}
	var roots *x509.CertPool
	if bc.TLSCAFile != "" {
		var err error
		if roots, err = loadRoots(bc.TLSCAFile); err != nil {
			return "", nil, err
		}
	}
	single := bc.SingleAddr
	if single == "" {
		single = bc.Addrs[0]
	}
	type named struct{ role, addr string }
	var all []named
	for _, a := range bc.Addrs[:bc.Masters] {
		all = append(all, named{"master", a})
	}
	all = append(all, named{"single", single})
	if bc.FenceAddr != "" {
		all = append(all, named{"fence", bc.FenceAddr})
	}
	var servers []*server
	byAddr := make(map[string]*server, len(all))
	tls := false
	for _, n := range all {
		s, err := parseServer(n.role, n.addr, bc.Password, roots)
		if err != nil {
			return "", nil, err
		}
		tls = tls || s.opts.TLSConfig != nil
		if prev, ok := byAddr[s.opts.Addr]; ok {
			// One server counted twice would let a quorum form with fewer servers than it
			// claims, so the numbers would describe a different lock.
			if n.role == "master" {
				return "", nil, fmt.Errorf("%w: master %s listed twice", ErrConfig, s.shown)
			}
			// One host:port is one set of client options, so a role may share a master's
			// server only as the master reaches it.
			if !sameSettings(prev.opts, s.opts) {
				return "", nil, fmt.Errorf("%w: %s %s is %s %s with other settings (user, password, db or TLS)",
					ErrConfig, n.role, s.shown, prev.role, prev.shown)
			}
		}
		byAddr[s.opts.Addr] = s
		servers = append(servers, s)
	}
	if roots != nil && !tls {
		return "", nil, fmt.Errorf("%w: a TLS CA file is given but no address is rediss://", ErrConfig)
	}
	return kind, servers, nil
}

func checkHostPort(role, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%w: %s address %q is not host:port", ErrConfig, role, addr)
	}
	return nil
}

// newPrefix returns a random run prefix. Runs against the same addrs servers must not share
// one, or one run's Close would delete the keys of another.
func newPrefix() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("backend: run prefix: %w", err)
	}
	return "redlock-bench-" + hex.EncodeToString(b[:]), nil
}

func (e *Env) openEmbedded(ctx context.Context, masters int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("backend: open: %w", err)
	}
	version := miniredisVersion()
	addrs := make([]string, masters+2)
	for i := range addrs {
		m, err := embeddedredis.Start()
		if err != nil {
			return fmt.Errorf("backend: start miniredis: %w", err)
		}
		e.minis = append(e.minis, m)
		addrs[i] = m.Addr()
	}
	versions := make([]string, len(addrs))
	for i := range versions {
		versions[i] = version
	}
	e.assign(addrs, versions)
	return nil
}

// assign sets Masters, Single, Fence and Servers from servers the backend started: the
// masters first, then the single server, then the fence.
func (e *Env) assign(addrs, versions []string) {
	n := len(addrs) - 2
	e.Masters = addrs[:n:n]
	e.Single, e.Fence = addrs[n], addrs[n+1]
	for i, a := range addrs {
		role := "master"
		switch i {
		case n:
			role = "single"
		case n + 1:
			role = "fence"
		}
		e.Servers = append(e.Servers, report.ServerInfo{Role: role, Addr: a, Version: versions[i]})
	}
}

var miniredisVersion = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "miniredis"
	}
	for _, d := range info.Deps {
		if d.Path != miniredisModule {
			continue
		}
		if d.Replace != nil {
			d = d.Replace
		}
		if d.Version == "" || d.Version == "(devel)" {
			break
		}
		return "miniredis " + d.Version
	}
	return "miniredis"
})

func (e *Env) openRedisServer(ctx context.Context, masters int) error {
	servers := make([]*redisserver.Server, masters+2)
	g, gctx := errgroup.WithContext(ctx)
	for i := range servers {
		g.Go(func() error {
			s, err := redisserver.Start(gctx, redisserver.Options{})
			servers[i] = s
			return err
		})
	}
	err := g.Wait()
	// Kept before the error check, so that Open's cleanup stops the servers that started
	// before another failed.
	for _, s := range servers {
		if s != nil {
			e.servers = append(e.servers, s)
		}
	}
	if errors.Is(err, redisserver.ErrNotInstalled) {
		return fmt.Errorf("backend: %w; install it (apt-get install redis-server) or use the embedded backend", err)
	}
	if err != nil {
		return fmt.Errorf("backend: start redis-server: %w", err)
	}

	addrs := make([]string, len(servers))
	versions := make([]string, len(servers))
	g, gctx = errgroup.WithContext(ctx)
	for i, s := range servers {
		addrs[i] = s.Addr()
		g.Go(func() error {
			v, err := s.Version(gctx)
			versions[i] = v
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	e.assign(addrs, versions)
	return nil
}

// unreachableError names the first addrs server, in role order, that did not answer.
type unreachableError struct {
	role, addr string
	err        error
	more       int // other servers that did not answer either
}

func (u *unreachableError) Error() string {
	// A joined cause would break the one line the CLI prints.
	cause := strings.ReplaceAll(u.err.Error(), "\n", "; ")
	msg := fmt.Sprintf("backend: cannot reach %s %s: %s", u.role, u.addr, cause)
	if u.more > 0 {
		msg += fmt.Sprintf(" (and %d more unreachable)", u.more)
	}
	return msg
}

func (u *unreachableError) Unwrap() []error { return []error{ErrUnreachable, u.err} }

func (e *Env) openAddrs(ctx context.Context, servers []*server) error {
	e.opts = make(map[string]*redis.Options, len(servers))
	for _, s := range servers {
		switch s.role {
		case "master":
			e.Masters = append(e.Masters, s.opts.Addr)
		case "single":
			e.Single = s.opts.Addr
		case "fence":
			e.Fence = s.opts.Addr
		}
		e.Servers = append(e.Servers, report.ServerInfo{Role: s.role, Addr: s.shown})
		e.hosts = append(e.hosts, s.opts.Addr)
		e.opts[s.opts.Addr] = s.opts
		e.secrets = append(e.secrets, s.secrets...)
	}

	addrs := e.distinctAddrs()
	versions := make([]string, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() { versions[i], errs[i] = checkServer(ctx, e.opts[a]) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("backend: open: %w", err)
	}

	var first *unreachableError
	for i, err := range errs {
		if err == nil {
			continue
		}
		role, shown := e.roleOf(addrs[i])
		err = scrubError(err, e.secrets)
		if !isUnreachable(err) {
			return fmt.Errorf("backend: %s %s: %w", role, shown, err)
		}
		if first == nil {
			first = &unreachableError{role: role, addr: shown, err: err}
		} else {
			first.more++
		}
	}
	if first != nil {
		return first
	}
	byAddr := make(map[string]string, len(addrs))
	for i, a := range addrs {
		byAddr[a] = versions[i]
	}
	for i := range e.Servers {
		e.Servers[i].Version = byAddr[e.hosts[i]]
	}
	return nil
}

// ClientOptions returns the options of a go-redis client for addr, one of the Env's
// addresses: for Kind "addrs", the user, password, database and TLS settings its URL and
// Config gave; else, and for any other address, only Addr. Each call returns a new copy.
func (e *Env) ClientOptions(addr string) *redis.Options {
	if o, ok := e.opts[addr]; ok {
		return cloneOptions(o)
	}
	return &redis.Options{Addr: addr}
}

// distinctAddrs returns each host:port of an addrs Env once, in role order.
func (e *Env) distinctAddrs() []string {
	var addrs []string
	seen := make(map[string]bool, len(e.hosts))
	for _, a := range e.hosts {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// roleOf returns the first role addr has, which is the one a user thinks of first, and the
// address as it may be printed.
func (e *Env) roleOf(addr string) (role, shown string) {
	for i, a := range e.hosts {
		if a == addr {
			return e.Servers[i].Role, e.Servers[i].Addr
		}
	}
	return "server", addr
}

// isUnreachable tells a server that did not answer from one that answered with an error
// (NOAUTH, for example): the second is reachable, and its message says more on its own.
func isUnreachable(err error) bool {
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

// connect returns a client for addr once a TCP connection to it succeeds. The dial comes
// first because go-redis's pool logs each failed dial to stderr, and the CLI's message for a
// dead server must be only the line Open returns. The client does not retry and gives up
// after timeout: Open and Close talk to each server a handful of times, and a dead one must
// fail at once, not after the library's redials.
func connect(ctx context.Context, opts *redis.Options, timeout time.Duration) (*redis.Client, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, err
	}
	_ = conn.Close()
	o := cloneOptions(opts)
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = timeout, timeout, timeout
	o.ContextTimeoutEnabled = true
	o.PoolSize = 1
	o.DisableIdentity = true
	return redis.NewClient(o), nil
}

// checkServer PINGs addr and returns its redis_version. A server that answers PING but not INFO
// server (a Redis-compatible server, say) is still usable; its version is "unknown".
func checkServer(ctx context.Context, opts *redis.Options) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	c, err := connect(ctx, opts, checkTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		if isUnreachable(err) {
			return "", err
		}
		return "unknown", nil
	}
	if v := infoField(info, "redis_version"); v != "" {
		return v, nil
	}
	return "unknown", nil
}

// infoField returns the value of key in the text of an INFO reply.
func infoField(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// Close stops the servers Open started and waits until they are gone. For Kind "addrs" it
// deletes the run's keys (lock:<Prefix>:* and fence:<Prefix>:*) from each server instead; it
// never flushes, since those servers may hold data that is not ours. A second call does
// nothing and returns nil.
func (e *Env) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.Backend == kindAddrs {
		return e.deleteKeys(ctx)
	}
	return e.stopServers()
}

// stopServers stops every server Open started, in parallel, since each redis-server may
// take a moment to exit.
func (e *Env) stopServers() error {
	for _, m := range e.minis {
		m.Close()
	}
	errs := make([]error, len(e.servers))
	var wg sync.WaitGroup
	for i, s := range e.servers {
		wg.Go(func() {
			if err := s.Stop(); err != nil {
				errs[i] = fmt.Errorf("backend: stop redis-server %s (pid %d): %w", s.Addr(), s.Pid(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *Env) deleteKeys(ctx context.Context) error {
	addrs := e.distinctAddrs()
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			if err := deleteRunKeys(ctx, e.opts[a], e.Prefix); err != nil {
				_, shown := e.roleOf(a)
				errs[i] = fmt.Errorf("backend: delete keys of %s on %s: %w", e.Prefix, shown, scrubError(err, e.secrets))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deleteRunKeys deletes the keys of the run with prefix on addr. SCAN rather than KEYS, so
// that a server with many keys is not blocked; deleting while scanning is safe, since SCAN
// still returns every key that exists throughout the scan.
func deleteRunKeys(ctx context.Context, opts *redis.Options, prefix string) error {
	c, err := connect(ctx, opts, cleanupTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	// The prefix is "redlock-bench-" and hex digits, which hold no glob characters.
	for _, pattern := range []string{"lock:" + prefix + ":*", "fence:" + prefix + ":*"} {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return fmt.Errorf("SCAN %s: %w", pattern, err)
			}
			for batch := range slices.Chunk(keys, delBatch) {
				if err := c.Del(ctx, batch...).Err(); err != nil {
					return fmt.Errorf("DEL: %w", err)
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return nil
}

// FreeAddr returns a loopback address that nothing listens on, for a master that refuses
// every connection. The port is free when FreeAddr returns; another process may take it
// later, so use the address soon.
func FreeAddr() (string, error) {
	port, err := childproc.FreePort()
	if err != nil {
		return "", fmt.Errorf("backend: %w", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

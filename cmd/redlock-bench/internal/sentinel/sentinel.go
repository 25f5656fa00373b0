// Package sentinel runs one Redis master under Redis Sentinel for the chaos suite: a primary
// redis-server, one replica of it and one or more sentinels monitoring it, all real child
// processes on free 127.0.0.1 ports in a temporary dir, with timings short enough for a
// failover in about a second. A [Group] kills the primary and waits until Sentinel has promoted
// the replica, and can hold back replication first, so that a write acknowledged by the primary
// is lost in the failover. A group fails over once: it does not restart the killed primary or
// add replicas, and it shapes no network traffic (that is [quorumlock.dev/internal/harness/faultproxy]).
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/internal/harness/childproc"
	"quorumlock.dev/internal/harness/redisserver"
)

const (
	masterName = "quorumlock"
	// failoverTimeout is Sentinel's failover-timeout: a failover whose promotion it has not
	// seen within it is abandoned and tried again after twice as long. Sentinel confirms a
	// promotion by INFO, once a second during a failover, so 5 s leaves room for a loaded
	// machine; no failover here waits for it otherwise.
	failoverTimeout  = 5 * time.Second
	defaultDownAfter = 400 * time.Millisecond
	// startTimeout and waitTimeout bound Start and WaitFailover under a ctx without deadline:
	// a group that cannot come up or fail over must not hang a test until its own timeout.
	startTimeout = 30 * time.Second
	waitTimeout  = 30 * time.Second
	stopTimeout  = 2 * time.Second
	pollInterval = 20 * time.Millisecond
	// pauseFor is how long PauseReplication holds writes at most; it only bounds a pause that
	// nobody ends, since KillPrimary, ResumeReplication and Stop all end it.
	pauseFor = 24 * time.Hour
)

// Options configures [Start]. The zero value runs one sentinel that calls the primary down
// after 400 ms without an answer.
type Options struct {
	// Sentinels is the number of sentinels; 0 means 1. Their quorum is a majority of them.
	Sentinels int
	// DownAfter is Sentinel's down-after-milliseconds: how long the primary must fail to
	// answer before a failover starts; 0 means 400 ms. It is rounded up to a millisecond.
	DownAfter time.Duration
}

// Group is a primary, its replica and the sentinels that monitor them. Its methods are safe
// for concurrent use.
type Group struct {
	dir       string
	primary   *redisserver.Server
	replica   *redisserver.Server
	sentinels []*childproc.Process
	// Our own control connections, which see a hung server as an error within ctx rather than
	// after go-redis's read timeout.
	primaryc, replicac *redis.Client
	sentinelc          []*redis.SentinelClient

	mu     sync.Mutex
	killed bool // KillPrimary has run
	paused bool // the replica holds the primary's writes

	stopOnce sync.Once
	stopErr  error
}

// Start runs a primary, a replica and opt.Sentinels sentinels, and returns once the replica
// has applied a write made on the primary and every sentinel names the primary, knows the
// replica and knows the other sentinels; or when ctx ends, or after 30 s. The processes
// outlive ctx until [Group.Stop]. On failure nothing keeps running. Without redis-server on
// PATH, the error wraps [redisserver.ErrNotInstalled].
func Start(ctx context.Context, opt Options) (*Group, error) {
	if opt.Sentinels < 0 || opt.DownAfter < 0 {
		return nil, fmt.Errorf("sentinel: invalid options: %d sentinels, down after %v", opt.Sentinels, opt.DownAfter)
	}
	n := max(opt.Sentinels, 1)
	downAfter := opt.DownAfter
	if downAfter == 0 {
		downAfter = defaultDownAfter
	}
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", redisserver.ErrNotInstalled)
	}
	dir, err := os.MkdirTemp("", "sentinel-")
	if err != nil {
		return nil, fmt.Errorf("sentinel: %w", err)
	}
	g := &Group{dir: dir}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := g.start(ctx, binary, n, downAfter); err != nil {
		return nil, errors.Join(fmt.Errorf("sentinel: start: %w", err), g.Stop())
	}
	return g, nil
}

func (g *Group) start(ctx context.Context, binary string, n int, downAfter time.Duration) error {
	var err error
	// No delay before a diskless full sync: the default waits 5 s for more replicas.
	g.primary, err = redisserver.Start(ctx, redisserver.Options{Dir: filepath.Join(g.dir, "primary"),
		Binary: binary, Args: []string{"--repl-diskless-sync-delay", "0"}})
	if err != nil {
		return err
	}
	g.primaryc = control(g.primary.Addr())
	g.replica, err = redisserver.Start(ctx, redisserver.Options{Dir: filepath.Join(g.dir, "replica"),
		Binary: binary, Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(g.primary.Port())}})
	if err != nil {
		return err
	}
	g.replicac = control(g.replica.Addr())
	if err := g.waitSync(ctx); err != nil {
		return err
	}
	// Started after the replica is in sync, a sentinel learns of it from the primary's first
	// INFO instead of the next one, 10 s later.
	for i := range n {
		p, err := startSentinel(ctx, binary, filepath.Join(g.dir, "sentinel-"+strconv.Itoa(i)),
			g.primary.Port(), n/2+1, downAfter)
		if err != nil {
			return err
		}
		g.sentinels = append(g.sentinels, p)
		g.sentinelc = append(g.sentinelc, redis.NewSentinelClient(controlOptions(addr(p.Port()))))
	}
	return g.poll(ctx, g.sentinelsReady)
}

// waitSync returns once the replica has acknowledged a write made on the primary. The replica
// reports master_link_status:up earlier: after a diskless sync the primary streams writes
// only once the replica's first acknowledgement arrives, up to a second later.
func (g *Group) waitSync(ctx context.Context) error {
	conn := g.primaryc.Conn() // WAIT counts acknowledgements of this connection's writes
	defer conn.Close()
	key := masterName + ":sentinel:sync"
	if err := conn.Set(ctx, key, "1", 0).Err(); err != nil {
		return err
	}
	if err := conn.Del(ctx, key).Err(); err != nil {
		return err
	}
	return g.poll(ctx, func(ctx context.Context) error {
		// A short WAIT, repeated: each one asks the replica for its offset again.
		acked, err := conn.Wait(ctx, 1, 100*time.Millisecond).Result()
		if err == nil && acked < 1 {
			err = errors.New("the replica has not acknowledged a write")
		}
		return err
	})
}

// startSentinel runs redis-server in sentinel mode in dir, monitoring the primary on port.
func startSentinel(ctx context.Context, binary, dir string, port, quorum int, downAfter time.Duration) (*childproc.Process, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Sentinel rewrites its config file, so each has one of its own.
	conf := filepath.Join(dir, "sentinel.conf")
	ms := (downAfter + time.Millisecond - 1) / time.Millisecond
	text := fmt.Sprintf("dir %q\nsentinel monitor %s 127.0.0.1 %d %d\n"+
		"sentinel down-after-milliseconds %[2]s %[5]d\nsentinel failover-timeout %[2]s %[6]d\n",
		dir, masterName, port, quorum, ms, failoverTimeout.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	return childproc.Start(ctx, childproc.Spec{
		Path: binary,
		Args: func(port int) []string {
			return []string{conf, "--sentinel", "--port", strconv.Itoa(port), "--bind", "127.0.0.1"}
		},
		Log: filepath.Join(dir, "sentinel.log"), // without a logfile directive it logs to stdout
		Ready: func(ctx context.Context, p *childproc.Process) error {
			c := redis.NewSentinelClient(controlOptions(addr(p.Port())))
			defer c.Close()
			info, err := infoOf(ctx, c, "server")
			if err != nil {
				return err
			}
			if info["process_id"] != strconv.Itoa(p.Pid()) || info["redis_mode"] != "sentinel" {
				return fmt.Errorf("port %d is process %s in %s mode, not sentinel %d",
					p.Port(), info["process_id"], info["redis_mode"], p.Pid())
			}
			return nil
		},
	})
}

// sentinelsReady reports whether every sentinel can fail the primary over: it names the
// primary, sees the replica up and knows every other sentinel, without which a quorum above
// one is never reached.
func (g *Group) sentinelsReady(ctx context.Context) error {
	for i, c := range g.sentinelc {
		at, err := primaryOf(ctx, c)
		if err != nil {
			return err
		}
		if at != g.primary.Addr() {
			return fmt.Errorf("sentinel %d names %s, not %s", i, at, g.primary.Addr())
		}
		replicas, err := c.Replicas(ctx, masterName).Result()
		if err != nil {
			return err
		}
		if !hasReplica(replicas, g.replica.Addr()) {
			return fmt.Errorf("sentinel %d does not see replica %s up: %v", i, g.replica.Addr(), replicas)
		}
		others, err := c.Sentinels(ctx, masterName).Result()
		if err != nil {
			return err
		}
		if len(others) != len(g.sentinelc)-1 {
			return fmt.Errorf("sentinel %d knows %d other sentinels, not %d", i, len(others), len(g.sentinelc)-1)
		}
	}
	return nil
}

func hasReplica(replicas []map[string]string, want string) bool {
	for _, r := range replicas {
		if r["name"] == want && r["flags"] == "slave" {
			return true
		}
	}
	return false
}

// MasterName returns the name the sentinels monitor the primary under, for
// redis.FailoverOptions.MasterName.
func (g *Group) MasterName() string { return masterName }

// SentinelAddrs returns the sentinels' "127.0.0.1:port" addresses, for
// redis.FailoverOptions.SentinelAddrs.
func (g *Group) SentinelAddrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, p := range g.sentinels {
		addrs[i] = addr(p.Port())
	}
	return addrs
}

// PrimaryAddr returns the address the sentinels name as primary. It fails if one of them
// does not answer or they name different servers, as they may during a failover.
func (g *Group) PrimaryAddr(ctx context.Context) (string, error) {
	var first string
	for i, c := range g.sentinelc {
		at, err := primaryOf(ctx, c)
		if err != nil {
			return "", fmt.Errorf("sentinel: primary: %w", err)
		}
		if i == 0 {
			first = at
		} else if at != first {
			return "", fmt.Errorf("sentinel: primary: sentinel 0 names %s, sentinel %d %s", first, i, at)
		}
	}
	return first, nil
}

// PauseReplication makes the replica hold the writes it receives from the primary, with
// CLIENT PAUSE WRITE on the replica, until [Group.ResumeReplication] or [Group.KillPrimary].
// The replica still answers reads and Sentinel's probes, so Sentinel still promotes it.
// SIGSTOP would not do: the kernel buffers the stream and the replica applies it on SIGCONT.
func (g *Group) PauseReplication(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.killed {
		return errors.New("sentinel: pause replication: the primary was killed, no replica is left")
	}
	err := g.replicac.Do(ctx, "client", "pause", pauseFor.Milliseconds(), "write").Err()
	if err != nil {
		return fmt.Errorf("sentinel: pause replication: %w", err)
	}
	g.paused = true
	return nil
}

// ResumeReplication lets the replica apply the writes it held. After [Group.KillPrimary],
// which dropped them, it does nothing.
func (g *Group) ResumeReplication(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resume(ctx)
}

// resume is ResumeReplication with g.mu held.
func (g *Group) resume(ctx context.Context) error {
	if !g.paused {
		return nil
	}
	if err := g.replicac.Do(ctx, "client", "unpause").Err(); err != nil {
		return fmt.Errorf("sentinel: resume replication: %w", err)
	}
	g.paused = false
	return nil
}

// KillPrimary ends the primary with SIGKILL. If replication is paused, it waits until the
// replica has lost its link to the primary, which drops the writes it held, and resumes it,
// so that the promoted replica lacks them and takes writes. It fails if it has run before.
func (g *Group) KillPrimary(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.killed {
		return errors.New("sentinel: kill primary: killed already; a group fails over once")
	}
	if err := g.primary.Kill(); err != nil {
		return fmt.Errorf("sentinel: kill primary: %w", err)
	}
	g.killed = true
	if !g.paused {
		return nil
	}
	// Resumed before it sees the link drop, the replica would apply what it held.
	err := g.poll(ctx, func(ctx context.Context) error {
		info, err := infoOf(ctx, g.replicac, "replication")
		if err == nil && info["master_link_status"] != "down" {
			err = fmt.Errorf("replica %s: master_link_status:%s", g.replica.Addr(), info["master_link_status"])
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("sentinel: kill primary: %w", err)
	}
	return g.resume(ctx)
}

// WaitFailover returns the replica's address once every sentinel names it as primary and it
// reports role:master, or an error when ctx ends, or after 30 s.
func (g *Group) WaitFailover(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	want := g.replica.Addr()
	err := g.poll(ctx, func(ctx context.Context) error {
		for i, c := range g.sentinelc {
			at, err := primaryOf(ctx, c)
			if err != nil {
				return err
			}
			if at != want {
				return fmt.Errorf("sentinel %d names %s", i, at)
			}
		}
		info, err := infoOf(ctx, g.replicac, "replication")
		if err == nil && info["role"] != "master" {
			err = fmt.Errorf("%s reports role:%s", want, info["role"])
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("sentinel: wait for failover to %s: %w", want, err)
	}
	return want, nil
}

// Stop ends the sentinels, then the replica, then the primary, and removes the group's dir.
// It may be called any number of times.
func (g *Group) Stop() error {
	g.stopOnce.Do(func() {
		var errs []error
		// The sentinels go first, so that none fails over while the servers stop.
		for _, c := range g.sentinelc {
			_ = c.Close()
		}
		for _, p := range g.sentinels {
			p.Stop(syscall.SIGTERM, stopTimeout)
		}
		// The replica before the primary, which would wait for it to catch up.
		for _, c := range []*redis.Client{g.replicac, g.primaryc} {
			if c != nil {
				_ = c.Close()
			}
		}
		for _, s := range []*redisserver.Server{g.replica, g.primary} {
			if s != nil {
				errs = append(errs, s.Stop())
			}
		}
		if err := os.RemoveAll(g.dir); err != nil {
			errs = append(errs, fmt.Errorf("sentinel: %w", err))
		}
		g.stopErr = errors.Join(errs...)
	})
	return g.stopErr
}

// poll calls check every pollInterval until it returns nil, and returns its last error
// joined with ctx's when ctx ends first.
func (g *Group) poll(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

func primaryOf(ctx context.Context, c *redis.SentinelClient) (string, error) {
	hp, err := c.GetMasterAddrByName(ctx, masterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %q", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// infoOf returns the fields of INFO section from c, a *redis.Client or a *redis.SentinelClient.
func infoOf(ctx context.Context, c interface {
	Process(context.Context, redis.Cmder) error
}, section string) (map[string]string, error) {
	cmd := redis.NewStringCmd(ctx, "info", section)
	if err := c.Process(ctx, cmd); err != nil {
		return nil, err
	}
	info := make(map[string]string)
	for _, line := range strings.Split(cmd.Val(), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// control returns a client for our own commands to a server.
func control(addr string) *redis.Client { return redis.NewClient(controlOptions(addr)) }

func controlOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ContextTimeoutEnabled: true,
		PoolSize:              2,
		// Redis 7.0 does not know CLIENT SETINFO, which go-redis would send on each new
		// connection only to have it refused.
		DisableIdentity: true,
	}
}

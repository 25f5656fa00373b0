// Package etcdcluster runs a three-member etcd cluster for redlock-bench choose: child
// processes of Debian's etcd-server binary on free loopback ports, in a temporary dir, with
// election timings short enough that losing the leader costs about a second. A [Cluster] can
// name its leader and kill a member; it does not restart one, and it shapes no traffic.
package etcdcluster

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
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"quorumlock.dev/internal/harness/childproc"
)

// ErrNotInstalled says that the etcd binary is not on this machine's PATH.
var ErrNotInstalled = errors.New("etcdcluster: etcd not installed")

// Members is the number of members of a cluster.
const Members = 3

const (
	startBy  = 30 * time.Second
	stopWait = 2 * time.Second
)

// Cluster is a three-member etcd cluster of child processes (Debian's etcd-server binary),
// each on two free loopback ports, in a temporary dir.
type Cluster struct {
	dir     string
	members []*childproc.Process
	clients []string // client URL of each member
}

// Start starts a cluster and returns once a write through it commits. Without an etcd
// binary on PATH it returns [ErrNotInstalled].
func Start(ctx context.Context) (*Cluster, error) {
	binary, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNotInstalled
	}
	ctx, cancel := context.WithTimeout(ctx, startBy)
	defer cancel()
	// The peer ports are picked free before any member starts, so another
	// process may take one in between, and a member then exits (seen once
	// in CI): the whole cluster is started again on new ports, up to
	// three times.
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "choose-etcd-")
		if err != nil {
			return nil, fmt.Errorf("etcdcluster: %w", err)
		}
		c := &Cluster{dir: dir}
		err = c.start(ctx, binary)
		if err == nil {
			return c, nil
		}
		c.Stop()
		if attempt == 3 || ctx.Err() != nil {
			return nil, fmt.Errorf("etcdcluster: start (attempt %d): %w", attempt, err)
		}
	}
}

func (c *Cluster) start(ctx context.Context, binary string) error {
	peers := make([]int, Members)
	clients := make([]int, Members)
	var initial []string
	for i := range Members {
		var err error
		if peers[i], err = childproc.FreePort(); err != nil {
			return err
		}
		if clients[i], err = childproc.FreePort(); err != nil {
			return err
		}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, loopURL(peers[i])))
		c.clients = append(c.clients, loopURL(clients[i]))
	}
	for i := range Members {
		name, data := fmt.Sprintf("m%d", i), filepath.Join(c.dir, fmt.Sprintf("m%d", i))
		peer := loopURL(peers[i])
		p, err := childproc.Start(ctx, childproc.Spec{
			Path: binary,
			Port: clients[i],
			Dir:  c.dir,
			Log:  filepath.Join(c.dir, name+".log"),
			Args: func(port int) []string {
				return []string{
					"--name", name, "--data-dir", data,
					"--listen-client-urls", loopURL(port), "--advertise-client-urls", loopURL(port),
					"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
					"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
					"--initial-cluster-token", filepath.Base(c.dir),
					// Short enough that losing the leader costs about a second, long enough
					// for three members and a benchmark on two loaded cores.
					"--heartbeat-interval", "100", "--election-timeout", "1000",
					"--logger", "zap", "--log-level", "warn",
				}
			},
			// A member serves only once the cluster has a leader, which needs the others:
			// its port accepting is ready enough; the commit below checks the cluster.
			Ready: func(ctx context.Context, p *childproc.Process) error {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port())))
				if err == nil {
					conn.Close()
				}
				return err
			},
		})
		if err != nil {
			return err
		}
		c.members = append(c.members, p)
	}
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(pctx, "choose/ready", "")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Client returns a client of every member, which fails over between them.
func (c *Cluster) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   c.clients,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// Kill ends member i with SIGKILL.
func (c *Cluster) Kill(i int) { c.members[i].Kill() }

// Stop ends every member and removes the dir.
func (c *Cluster) Stop() {
	for _, p := range c.members {
		p.Stop(syscall.SIGTERM, stopWait)
	}
	_ = os.RemoveAll(c.dir)
}

func loopURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// Leader returns the index of the member that leads the cluster, as cli finds it.
func (c *Cluster) Leader(ctx context.Context, cli *clientv3.Client) (int, error) {
	for i, ep := range c.clients {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return 0, fmt.Errorf("status of %s: %w", ep, err)
		}
		if st.Header.MemberId == st.Leader {
			return i, nil
		}
	}
	return 0, errors.New("no member leads")
}

package choose

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

	"quorumlock.dev/internal/childproc"
)

// ErrNotInstalled says that a server an option needs is not on this machine.
var ErrNotInstalled = errors.New("choose: server not installed")

const (
	etcdMembers  = 3
	etcdStartBy  = 30 * time.Second
	etcdStopWait = 2 * time.Second
)

// etcdCluster is a three-member etcd cluster of child processes (Debian's etcd-server
// binary), each on two free loopback ports, in a temporary dir.
type etcdCluster struct {
	dir     string
	members []*childproc.Process
	clients []string // client URL of each member
}

// startEtcd starts the cluster and returns once a write through it commits.
func startEtcd(ctx context.Context) (*etcdCluster, error) {
	binary, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("%w: etcd (Debian package etcd-server)", ErrNotInstalled)
	}
	dir, err := os.MkdirTemp("", "choose-etcd-")
	if err != nil {
		return nil, fmt.Errorf("choose: %w", err)
	}
	c := &etcdCluster{dir: dir}
	ctx, cancel := context.WithTimeout(ctx, etcdStartBy)
	defer cancel()
	if err := c.start(ctx, binary); err != nil {
		c.stop()
		return nil, fmt.Errorf("choose: start etcd: %w", err)
	}
	return c, nil
}

func (c *etcdCluster) start(ctx context.Context, binary string) error {
	peers := make([]int, etcdMembers)
	clients := make([]int, etcdMembers)
	var initial []string
	for i := range etcdMembers {
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
	for i := range etcdMembers {
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
	cli, err := c.client()
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

// client returns a client of every member, which fails over between them.
func (c *etcdCluster) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   c.clients,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// kill ends member i with SIGKILL.
func (c *etcdCluster) kill(i int) { c.members[i].Kill() }

// stop ends every member and removes the dir.
func (c *etcdCluster) stop() {
	for _, p := range c.members {
		p.Stop(syscall.SIGTERM, etcdStopWait)
	}
	_ = os.RemoveAll(c.dir)
}

func loopURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

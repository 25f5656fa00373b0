package etcdfence_test

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sync/errgroup"

	"quorumlock.dev/internal/harness/childproc"
)

// readyWithin bounds a cluster's start and a new leader's election. The
// members run in the test's process, which the race detector slows and a
// loaded machine starves: generous, but bounded.
const readyWithin = 60 * time.Second

// cluster is an etcd cluster run in process, one embed.Etcd per member, on
// free loopback ports, in the test's temporary directory.
type cluster struct {
	t       testing.TB
	members []*member
}

type member struct {
	name      string
	clientURL string
	etcd      *embed.Etcd

	once sync.Once
}

// startCluster starts n members and waits until each is ready to serve. It
// stops the ones still running when the test ends.
//
// A free port is found by binding port 0 and closing it; until a member
// binds it, any socket of the machine may take it as its own local port
// (the members' and clients' connections do). A start that loses a port
// that way is retried on new ports, at most three times.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	for try := 1; ; try++ {
		c, err := tryStartCluster(t, n)
		if err == nil {
			return c
		}
		if try == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("try %d: %v; again on new ports", try, err)
	}
}

// tryStartCluster is one try of startCluster; on an error it has stopped
// what it started.
func tryStartCluster(t testing.TB, n int) (*cluster, error) {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t}
	peers := make([]string, n)
	cfgs := make([]*embed.Config, n)
	for i := range n {
		clientURL, peerURL := loopbackURL(t), loopbackURL(t)
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
		cfg.InitialClusterToken = filepath.Base(dir)
		// A 50 ms heartbeat and a 500 ms election timeout: a lost leader is
		// replaced within about a second, and a starved heartbeat only costs an
		// election, which the Minter rides out.
		cfg.TickMs, cfg.ElectionMs = 50, 500
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		peers[i] = cfg.Name + "=" + peerURL.String()
		cfgs[i] = cfg
		c.members = append(c.members, &member{name: cfg.Name, clientURL: clientURL.String()})
	}
	var g errgroup.Group
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(peers, ",")
		g.Go(func() error {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				return fmt.Errorf("start %s: %w", cfg.Name, err)
			}
			c.members[i].etcd = e
			return nil
		})
	}
	stop := func() {
		for _, m := range c.members {
			if m.etcd != nil {
				m.stop()
			}
		}
	}
	if err := g.Wait(); err != nil {
		stop()
		return nil, err
	}
	t.Cleanup(stop)
	deadline := time.After(readyWithin)
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			return nil, fmt.Errorf("etcd %s: %w", m.name, err)
		case <-deadline:
			t.Fatalf("etcd %s not ready within %v", m.name, readyWithin)
		}
	}
	return c, nil
}

// loopbackURL is http://127.0.0.1:<a free port>.
func loopbackURL(t testing.TB) url.URL {
	t.Helper()
	port, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
}

// kill stops the member the way a crash would, without handing its
// leadership over, and closes its listeners.
func (m *member) kill() {
	m.once.Do(func() {
		m.etcd.Server.HardStop()
		m.etcd.Close()
	})
}

func (m *member) stop() { m.once.Do(m.etcd.Close) }

// leader returns the member that leads, waiting for an election if none
// does.
func (c *cluster) leader() *member {
	c.t.Helper()
	deadline := time.Now().Add(readyWithin)
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if s := m.etcd.Server; s.Leader() == s.MemberID() {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no etcd leader within %v", readyWithin)
	return nil
}

// client returns an etcd client on the given members (every member when
// none is given), closed when the test ends.
func (c *cluster) client(members ...*member) *clientv3.Client {
	c.t.Helper()
	if len(members) == 0 {
		members = c.members
	}
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.clientURL)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints,
		// Keepalive pings find a dead member's connection between calls.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zapNop,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Package netns gives a server a network namespace of its own, reachable from the host over a
// veth pair, so that the chaos suite can partition it from the host and heal it: a [Host] is
// one namespace, and a redis-server runs in it through [Host.Wrap] bound to [Host.Addr].
// A partition drops every IPv4 packet on the namespace's veth (iptables rules inside the
// namespace, never on the host), so calls from the host hang rather than fail fast. It needs
// root, ip and iptables, and Linux; it does not shape traffic (no latency or loss), start
// servers, or remove namespaces left behind by a process that died without [Host.Close].
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	// ErrNotRoot is returned by [New] when the process is not root.
	ErrNotRoot = errors.New("netns: needs root")
	// ErrNoIptables is returned by [New] when iptables-restore (Debian package iptables) is
	// not on PATH.
	ErrNoIptables = errors.New("netns: iptables-restore not found on PATH (Debian package iptables)")
)

const (
	// peer is the veth end inside the namespace; the namespace is ours, so no name can clash.
	peer = "eth0"
	// netnsDir is where ip netns keeps a bind mount per named namespace.
	netnsDir = "/run/netns"
	// lockPath serialises address choice between the processes using this package.
	lockPath     = "/run/quorumlock-netns.lock"
	closeTimeout = 5 * time.Second
)

// subnets is 10.200.0.0/16 cut into /30s: the host end is .1 of each, the namespace end .2.
var subnets = netip.MustParsePrefix("10.200.0.0/16")

const numSubnets = 1 << (32 - 16 - 2)

// seq numbers the namespaces of this process.
var seq atomic.Uint32

// Host is one network namespace with a veth pair to the host. Its methods are safe for
// concurrent use.
type Host struct {
	name string     // the namespace, and the veth end on the host
	addr netip.Addr // the veth end in the namespace

	mu     sync.Mutex
	closed bool
}

// New creates a namespace named ql<pid>-<n>, a veth pair to it with addresses from a /30 of
// 10.200.0.0/16 that no host interface uses, and brings both ends and the namespace's lo up.
// On failure nothing is left behind.
func New(ctx context.Context) (*Host, error) {
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		return nil, ErrNoIptables
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	unlock, err := lockAddrs(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()

	h, err := create(ctx)
	if err != nil {
		return nil, err
	}
	hostEnd, nsEnd, err := freeSubnet(os.Getpid()*16 + int(seq.Load()))
	if err == nil {
		h.addr = nsEnd
		err = configure(ctx, h.name, hostEnd, nsEnd)
	}
	if err != nil {
		return nil, errors.Join(err, h.Close())
	}
	return h, nil
}

// create makes a namespace under a name no live namespace or host link has: a process that
// died without Close may have left one with our pid.
func create(ctx context.Context) (*Host, error) {
	for range 16 {
		name := fmt.Sprintf("ql%d-%d", os.Getpid(), seq.Add(1)%100000)
		if _, err := os.Stat(filepath.Join(netnsDir, name)); err == nil {
			continue
		}
		if _, err := net.InterfaceByName(name); err == nil {
			continue
		}
		if err := run(ctx, nil, "ip", "netns", "add", name); err != nil {
			return nil, err
		}
		return &Host{name: name}, nil
	}
	return nil, errors.New("netns: no free namespace name")
}

func configure(ctx context.Context, name string, hostEnd, nsEnd netip.Addr) error {
	steps := [][]string{
		{"ip", "link", "add", name, "type", "veth", "peer", "name", peer, "netns", name},
		{"ip", "addr", "add", hostEnd.String() + "/30", "dev", name},
		{"ip", "link", "set", name, "up"},
		{"ip", "-n", name, "addr", "add", nsEnd.String() + "/30", "dev", peer},
		{"ip", "-n", name, "link", "set", peer, "up"},
		{"ip", "-n", name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, nil, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// freeSubnet returns the two ends of the first /30, from the start-th on, that holds no
// address of a host interface. Another process's namespaces show up as its host ends.
func freeSubnet(start int) (hostEnd, nsEnd netip.Addr, err error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("netns: %w", err)
	}
	used := make(map[int]bool)
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && subnets.Contains(p.Addr()) {
			used[subnetIndex(p.Addr())] = true
		}
	}
	return freeSubnetFrom(start, used)
}

// freeSubnetFrom returns the two ends of the first /30 not in used, from the start-th on.
func freeSubnetFrom(start int, used map[int]bool) (hostEnd, nsEnd netip.Addr, err error) {
	for i := range numSubnets {
		idx := (start + i) % numSubnets
		if !used[idx] {
			base := subnets.Addr().As4()
			base[2], base[3] = byte(idx>>6), byte(idx&63)<<2
			a := netip.AddrFrom4(base)
			return a.Next(), a.Next().Next(), nil
		}
	}
	return netip.Addr{}, netip.Addr{}, errors.New("netns: every /30 of " + subnets.String() + " is in use")
}

func subnetIndex(a netip.Addr) int {
	b := a.As4()
	return int(b[2])<<6 | int(b[3])>>2
}

// lockAddrs takes an exclusive lock, between processes, on choosing and assigning addresses.
func lockAddrs(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	// Polled, since flock cannot be interrupted by ctx.
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			// Closing the file releases the lock.
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("netns: lock %s: %w", lockPath, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("netns: lock %s: %w", lockPath, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Addr returns the namespace's IPv4 address, where a server inside binds.
func (h *Host) Addr() string { return h.addr.String() }

// Wrap returns the command prefix that runs a program in the namespace. ip netns exec execs
// the program in its own process, so the pid is the program's, as
// redisserver.Options.Wrap requires.
func (h *Host) Wrap() []string { return []string{"ip", "netns", "exec", h.name} }

// Partition drops every packet between the host and the namespace, both ways, from one atomic
// rule change. Packets are dropped, not rejected: a connect or a command from the host hangs
// until its own timeout. Partitioning a partitioned Host changes nothing.
func (h *Host) Partition(ctx context.Context) error {
	return h.rules(ctx, "-A INPUT -i "+peer+" -j DROP\n-A OUTPUT -o "+peer+" -j DROP\n")
}

// Heal removes the partition, atomically. TCP connections that outlived it carry on: what was
// sent during it is delivered by the next retransmission. Healing a healed Host changes nothing.
func (h *Host) Heal(ctx context.Context) error { return h.rules(ctx, "") }

// rules replaces the namespace's filter table with ACCEPT policies and the given rules.
func (h *Host) rules(ctx context.Context, rules string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("netns: %s: closed", h.name)
	}
	table := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + rules + "COMMIT\n"
	return run(ctx, strings.NewReader(table), "ip", "netns", "exec", h.name, "iptables-restore", "-w", "5")
}

// Close deletes the namespace, which deletes the veth pair, and waits up to 5 s for the host
// end to go. The kernel keeps a namespace while a process runs in it: stop servers first.
// Closing a closed Host does nothing.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if _, err := os.Stat(filepath.Join(netnsDir, h.name)); err == nil {
		if err := run(ctx, nil, "ip", "netns", "del", h.name); err != nil {
			return err
		}
	}
	h.closed = true
	// The kernel destroys a namespace, and so the veth, asynchronously.
	for {
		if _, err := net.InterfaceByName(h.name); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netns: %s: veth still on the host after %v; is a process still in the namespace?", h.name, closeTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// run runs a command with stdin and returns an error carrying its output if it fails.
func run(ctx context.Context, stdin *strings.Reader, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		return fmt.Errorf("netns: %s %s: %w: %s", path, strings.Join(args, " "), errors.Join(err, ctx.Err()), msg)
	}
	return nil
}

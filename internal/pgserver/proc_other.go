//go:build unix && !linux

package pgserver

import "syscall"

// sysProcAttr runs a child as cred (nil: as ourselves), in a process group of its own so that
// a terminal's ^C reaches only the test binary. Without Linux's Pdeathsig, a server outlives a
// test binary that dies without calling Stop.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// children returns nothing: without /proc, Pause and the SIGKILL fallback of Stop reach only
// the postmaster.
func children(int) []int { return nil }

// waitStopped returns at once: without /proc there is no portable way to see a stopped process.
func waitStopped(int) {}

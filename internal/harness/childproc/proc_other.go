//go:build unix && !linux

package childproc

import "syscall"

// SysProcAttr is what [Start] gives a process, for a helper command the caller runs itself: a
// process group of its own and the user cred (nil: ourselves). Without Linux's Pdeathsig, a
// server outlives a test binary that dies without stopping it.
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// children returns nothing: without /proc, Pause and Kill reach only the process and its group.
func children(int) []int { return nil }

// waitStopped returns at once: without /proc there is no portable way to see a stopped process.
func waitStopped(int) {}

// Stopped reports false: without /proc a stopped process cannot be seen.
func Stopped(int) bool { return false }

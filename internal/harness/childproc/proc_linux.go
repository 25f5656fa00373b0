package childproc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// SysProcAttr is what [Start] gives a process, for a helper command the caller runs itself: a
// process group of its own, the user cred (nil: ourselves), and SIGKILL from the kernel if our
// process dies without stopping it (a test binary that panics or times out must not leave
// servers behind).
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	// The kernel ties Pdeathsig to the forking OS thread, which Go ends only when a goroutine
	// exits while locked to it; nothing here locks threads. Go sets Pdeathsig after switching
	// to cred, so the switch does not clear it.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// stat returns the state and the parent pid of process pid, from /proc/pid/stat.
func stat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, the last ')' ends it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}

// children returns the pids of the processes whose parent is pid. A server's children may call
// setsid (a postmaster's do), so a process group does not reach them; their parent pid does.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := stat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// waitStopped waits, at most 1 s, until process pid is stopped by a signal, has exited, or
// is gone: kill(2) returns before the target has stopped.
func waitStopped(pid int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		state, _, ok := stat(pid)
		if !ok || state == 'T' || state == 't' || state == 'Z' || state == 'X' {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Stopped reports whether process pid is stopped by a signal, as /proc says: how a fault
// injector verifies that its SIGSTOP took effect.
func Stopped(pid int) bool {
	state, _, ok := stat(pid)
	return ok && (state == 'T' || state == 't')
}

package redisserver

import "syscall"

// sysProcAttr puts the server in a process group of its own, so that killGroup also ends any
// child it forked for a background save, and asks the kernel to kill it if our process dies
// without calling Stop (a test binary that panics or times out must not leave servers behind).
// The kernel ties Pdeathsig to the forking OS thread, which Go ends only when a goroutine exits
// while locked to it; nothing here locks threads.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

//go:build unix && !linux

package redisserver

import "syscall"

// sysProcAttr puts the server in a process group of its own, so that killGroup also ends any
// child it forked for a background save. Without Linux's Pdeathsig, a server outlives a test
// binary that dies without calling Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

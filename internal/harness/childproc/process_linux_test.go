package childproc

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startShell starts sh running script as a server that is ready once it has a child, or at once
// if script execs.
func startShell(t *testing.T, script string) *Process {
	t.Helper()
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	var port int
	p, err := Start(t.Context(), Spec{
		Path: sh,
		Args: func(pt int) []string { port = pt; return []string{"-c", script} },
		Log:  filepath.Join(t.TempDir(), "log"),
		Ready: func(_ context.Context, p *Process) error {
			if strings.HasPrefix(script, "exec ") || len(children(p.Pid())) > 0 {
				return nil
			}
			return errors.New("no child yet")
		},
	})
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	assert.Equal(t, port, p.Port())
	return p
}

func state(t *testing.T, pid int) byte {
	t.Helper()
	s, _, ok := stat(pid)
	require.True(t, ok, "process %d", pid)
	return s
}

func TestPauseResumeKill(t *testing.T) {
	t.Parallel()
	p := startShell(t, "sleep 60 & wait")
	kids := children(p.Pid())
	require.Len(t, kids, 1)

	require.NoError(t, p.Pause())
	require.NoError(t, p.Pause(), "Pause twice")
	assert.Equal(t, byte('T'), state(t, p.Pid()))
	assert.Equal(t, byte('T'), state(t, kids[0]), "the child is paused too")
	require.NoError(t, p.Resume())
	// SIGCONT takes effect after kill(2) returned.
	assert.Eventually(t, func() bool { return state(t, kids[0]) != 'T' }, 2*time.Second, time.Millisecond)

	p.Kill()
	assert.Eventually(t, func() bool { _, _, ok := stat(kids[0]); return !ok }, 2*time.Second, 10*time.Millisecond, "the child is killed")
	select {
	case <-p.Done():
	default:
		t.Fatal("Kill returned before the process was reaped")
	}
	p.Kill()
	assert.Error(t, p.Pause(), "Pause after Kill")
	assert.Error(t, p.Resume(), "Resume after Kill")
}

func TestStop(t *testing.T) {
	t.Parallel()
	t.Run("graceful", func(t *testing.T) {
		t.Parallel()
		p := startShell(t, "exec sleep 60")
		require.NoError(t, p.Pause())
		start := time.Now()
		p.Stop(syscall.SIGTERM, 5*time.Second)
		assert.Less(t, time.Since(start), 2*time.Second, "a paused process is resumed, then ends on the signal")
	})
	t.Run("escalates", func(t *testing.T) {
		t.Parallel()
		p := startShell(t, `trap "" TERM; sleep 60 & wait`)
		start := time.Now()
		p.Stop(syscall.SIGTERM, 200*time.Millisecond)
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		<-p.Done()
		p.Stop(syscall.SIGTERM, time.Second)
	})
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	var attempts int
	_, err = Start(t.Context(), Spec{
		Path: sh,
		Args: func(int) []string {
			attempts++
			return []string{"-c", "echo 'bind: Address already in use'; exit 1"}
		},
		Log:   filepath.Join(t.TempDir(), "log"),
		Ready: func(context.Context, *Process) error { return errors.New("not ready") },
	})
	require.Error(t, err)
	assert.Equal(t, startAttempts, attempts, "a taken port is retried")
	assert.Contains(t, err.Error(), "sh exited")
	assert.Contains(t, err.Error(), "Address already in use", "the log's tail")
}

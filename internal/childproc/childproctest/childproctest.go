// Package childproctest holds the rule that test helpers starting servers through
// [quorumlock.dev/internal/childproc] apply when a server binary is missing: under CI=true the
// test fails, since a suite that skips there has silently tested nothing; elsewhere it skips.
package childproctest

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// Missing ends t because of err, a server binary that is not installed: it fails t when the
// environment variable CI is "true" and skips it otherwise. install says how to install it.
func Missing(t testing.TB, err error, install string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; CI must install it (%s)", err, install)
	}
	// Outside CI only: under CI=true the line above fails instead.
	t.Skipf("%v; install it (%s) to run this test (outside CI only: CI=true fails)", err, install)
}

// Ending is how a helper run by [Catch] ended its test.
type Ending struct {
	Failed, Skipped bool
	Msg             string
}

// Catch runs helper on a goroutine of its own with a [testing.TB] whose Fatal, Fatalf and
// Skipf end only helper, and returns how it ended the test: for testing helpers like the ones
// that call [Missing].
func Catch(t testing.TB, helper func(testing.TB)) Ending {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(r)
	}()
	<-done
	return r.end
}

type recorder struct {
	testing.TB
	end Ending
}

func (r *recorder) Fatal(args ...any) { r.stop(Ending{Failed: true, Msg: fmt.Sprint(args...)}) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.stop(Ending{Failed: true, Msg: fmt.Sprintf(format, args...)})
}
func (r *recorder) Skipf(format string, args ...any) {
	r.stop(Ending{Skipped: true, Msg: fmt.Sprintf(format, args...)})
}

func (r *recorder) stop(e Ending) {
	r.end = e
	runtime.Goexit()
}

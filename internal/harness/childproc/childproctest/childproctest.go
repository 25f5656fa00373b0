// Package childproctest holds the rule that test helpers starting servers through
// [quorumlock.dev/internal/harness/childproc] apply when a server binary is missing: under CI=true the
// test fails, since a suite that skips there has silently tested nothing; elsewhere it skips.
package childproctest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
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

// CheckMissing runs each helper with an empty PATH, under CI=true and with CI unset, and fails
// t unless the helper failed its test in CI and skipped it elsewhere, saying install.
func CheckMissing(t *testing.T, install string, helpers map[string]func(testing.TB)) {
	for name, helper := range helpers {
		for _, ci := range []string{"true", ""} {
			t.Run(name+"/CI="+ci, func(t *testing.T) {
				t.Setenv("PATH", t.TempDir())
				t.Setenv("CI", ci)
				end := catch(t, helper)
				if end.failed != (ci == "true") || end.skipped != (ci != "true") {
					t.Errorf("failed %v, skipped %v; want a failure in CI only, a skip elsewhere", end.failed, end.skipped)
				}
				if !strings.Contains(end.msg, install) {
					t.Errorf("the message %q does not say %q", end.msg, install)
				}
			})
		}
	}
}

// ending is how a helper run by catch ended its test.
type ending struct {
	failed, skipped bool
	msg             string
}

// catch runs helper on a goroutine of its own with a testing.TB whose Fatal, Fatalf and Skipf
// end only helper, and returns how it ended the test.
func catch(t testing.TB, helper func(testing.TB)) ending {
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
	end ending
}

func (r *recorder) Fatal(args ...any) { r.stop(ending{failed: true, msg: fmt.Sprint(args...)}) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.stop(ending{failed: true, msg: fmt.Sprintf(format, args...)})
}
func (r *recorder) Skipf(format string, args ...any) {
	r.stop(ending{skipped: true, msg: fmt.Sprintf(format, args...)})
}

func (r *recorder) stop(e ending) {
	r.end = e
	runtime.Goexit()
}

package drivertest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"quorumlock.dev/driver"
)

// bare has the two required methods and no capability.
type bare struct{}

func (bare) SetNX(context.Context, string, string, time.Duration) (bool, error) { return false, nil }
func (bare) Eval(context.Context, *driver.Script, []string, ...any) (any, error) {
	return nil, driver.Nil
}

type full struct{ bare }

func (full) Subscribe(context.Context) driver.Subscription                { return nil }
func (full) Info(context.Context, string) (string, error)                 { return "", nil }
func (full) Time(context.Context) (time.Time, error)                      { return time.Time{}, nil }
func (full) ConfigGet(context.Context, string) (map[string]string, error) { return nil, nil }
func (full) Describe() driver.Description                                 { return driver.Description{} }

// TestCapabilities: what RunFull fails on names each missing capability.
func TestCapabilities(t *testing.T) {
	err := Capabilities(bare{})
	require.Error(t, err)
	for _, name := range []string{"driver.Subscriber", "driver.Inspector", "driver.Describer"} {
		assert.Contains(t, err.Error(), name)
	}
	assert.NoError(t, Capabilities(full{}))
}

// TestSeamOnly: the kit depends on neither the lock nor the fence, so an
// adapter of another module runs it with the seam alone.
func TestSeamOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "quorumlock.dev/driver/drivertest").Output()
	require.NoError(t, err)
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		for _, not := range []string{"quorumlock.dev/redlock", "quorumlock.dev/fence", "quorumlock.dev/leadership"} {
			assert.False(t, dep == not || strings.HasPrefix(dep, not+"/"), "drivertest depends on %s", dep)
		}
	}
}

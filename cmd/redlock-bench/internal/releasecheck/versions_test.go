package releasecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/semver"
)

// clients are the Redis clients the adapters are tested with: each by the
// module path go.mod names it by, the adapter's module whose go.mod
// selects its version, and the names docs give it.
var clients = []struct {
	path, adapter string
	names         []string
}{
	{"github.com/redis/go-redis/v9", ".", []string{"github.com/redis/go-redis/v9", "go-redis/v9", "go-redis"}},
	{"github.com/redis/rueidis", "driver/rueidisdriver", []string{"github.com/redis/rueidis", "rueidis"}},
	{"github.com/valkey-io/valkey-go", "driver/valkeydriver", []string{"github.com/valkey-io/valkey-go", "valkey-go"}},
}

// versionNamed finds a version right after a client's name: "rueidis
// v1.0.79", "github.com/redis/rueidis (v1.0.79)".
func versionNamed(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?:^|[^\w./-])` + regexp.QuoteMeta(name) + `\)?\s*\(?(v\d+\.\d+(?:\.\d+)?)\b`)
}

// TestDriverVersionsInDocs: a version of go-redis, rueidis or valkey-go
// that the README or docs/ name is the one the adapter's go.mod selects
// (or its minor version, "v9.23"),
// which its tests ran with, and the CLI, whose runs docs/ publishes,
// selects the same. docs/drivers.md names each.
func TestDriverVersionsInDocs(t *testing.T) {
	mods, err := Modules(root)
	require.NoError(t, err)
	selected := map[string]map[string]string{} // module dir: client path: version
	for _, m := range mods {
		selected[m.Dir] = map[string]string{}
		for _, r := range m.GoMod.Require {
			selected[m.Dir][r.Mod.Path] = r.Mod.Version
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join(root, "README.md"))
	for _, c := range clients {
		want := selected[c.adapter][c.path]
		require.NotEmpty(t, want, "%s/go.mod does not require %s", c.adapter, c.path)
		assert.Equal(t, want, selected["cmd/redlock-bench"][c.path],
			"the CLI's go.mod selects another %s than %s's", c.path, c.adapter)
		named := 0
		for _, doc := range docs {
			src, err := os.ReadFile(doc)
			require.NoError(t, err)
			rel := strings.TrimPrefix(filepath.ToSlash(doc), root+"/")
			for i, line := range strings.Split(string(src), "\n") {
				for _, name := range c.names {
					for _, m := range versionNamed(name).FindAllStringSubmatch(line, -1) {
						named++
						// "v9.23" names the minor version: that of the selected one.
						selected := want
						if strings.Count(m[1], ".") == 1 {
							selected = semver.MajorMinor(want)
						}
						assert.Equal(t, selected, m[1], "%s:%d names %s %s; %s/go.mod selects %s: name that one",
							rel, i+1, name, m[1], c.adapter, want)
					}
				}
			}
		}
		assert.NotZero(t, named, "no doc names the %s version the adapter is tested with", c.path)
	}
}

func TestVersionNamed(t *testing.T) {
	for line, want := range map[string]string{
		"| github.com/redis/rueidis (v1.0.79) |": "v1.0.79",
		"with rueidis v1.0.80 and":               "v1.0.80",
		"github.com/redis/go-redis/v9 (v9.23)":   "v9.23",
		"go-redis v9 clients":                    "",
		"redis-server 7.0.15":                    "",
	} {
		var got string
		for _, name := range []string{"github.com/redis/rueidis", "rueidis", "github.com/redis/go-redis/v9", "go-redis"} {
			if m := versionNamed(name).FindStringSubmatch(line); m != nil {
				got = m[1]
				break
			}
		}
		assert.Equal(t, want, got, "%q", line)
	}
}

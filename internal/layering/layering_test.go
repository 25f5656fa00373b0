// Package layering holds the test of the root module's layout: which of
// the project's packages each package may import, so that the arrows
// between them run one way (README.md, "Layout"; docs/design.md, "Why the
// code is shaped as it is"). A package missing from the table fails the
// test: say where it stands when you add it.
package layering

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "quorumlock.dev/"

// allowed lists, for each package of the root module, the packages of the
// project its non-test files may import. Test harnesses (servers, proxies)
// are imported by tests only, never by the library.
var allowed = map[string][]string{
	// The seam and its adapters.
	"driver":         nil,
	"driver/goredis": {"driver"},
	// The lock's parts, which know nothing of Redis or of each other.
	"internal/nilcheck": nil,
	"internal/names":    nil,
	"quorum":            nil,
	"clockdrift":        nil,
	"internal/bounded":  nil,
	"internal/boottime": nil,
	"internal/bugs":     nil,
	"internal/seam":     {"driver"},
	// The fence.
	"fence/internal/rejection":  nil,
	"fence/internal/mintertest": nil,
	"fence/internal/fragment":   nil,
	"fence":                     {"driver", "fence/internal/rejection", "internal/bounded", "internal/bugs", "internal/names", "internal/nilcheck"},
	"fence/pgfence":             {"fence", "fence/internal/fragment", "fence/internal/rejection", "internal/names", "internal/nilcheck"},
	"fence/sqlfence":            {"fence", "fence/internal/fragment", "fence/internal/rejection", "internal/names", "internal/nilcheck"},
	// The guards' conformance kit: no lock, and an in-memory Redis for its counter.
	"fence/fencetest": {"fence", "internal/harness/memredis"},
	// The lock.
	"redlock/check":          {"driver", "internal/bounded"},
	"redlock/internal/push":  {"driver", "internal/bounded", "quorum"},
	"redlock/internal/watch": {"driver", "clockdrift", "internal/bounded"},
	"redlock/internal/retry": {"driver", "internal/bounded"},
	"redlock/internal/node":  nil,
	// The wait policies and what they agree on with the core: none of
	// them knows redlock, or another policy.
	"redlock/internal/wait":  {"driver", "quorum", "redlock/internal/push"},
	"redlock/internal/plain": {"driver", "internal/bugs", "quorum", "redlock/internal/push", "redlock/internal/wait"},
	"redlock/internal/fair":  {"driver", "fence", "internal/bugs", "quorum", "redlock/internal/push", "redlock/internal/wait"},
	"redlock":                {"driver", "fence", "clockdrift", "internal/nilcheck", "quorum", "redlock/check", "redlock/internal/push", "redlock/internal/fair", "redlock/internal/watch", "redlock/internal/retry", "redlock/internal/node", "redlock/internal/wait", "redlock/internal/plain", "internal/boottime", "internal/bugs", "internal/names", "internal/seam"},
	"redlock/redlockprom":    {"redlock", "redlock/check"},
	// Leadership, on the lock's public API.
	"leadership": {"driver", "internal/seam", "redlock"},
	// Test harnesses.
	"driver/drivertest": {"driver", "internal/harness/redisserver", "internal/harness/redistest"},
	// The lock over an adapter, for the adapters' own tests (not the kit).
	"driver/internal/locktest":                 {"driver", "driver/drivertest", "fence", "internal/harness/redisserver", "internal/harness/redistest", "redlock"},
	"internal/harness/memredis":                {"driver"},
	"internal/harness/sim":                     {"driver", "fence", "internal/boottime", "internal/bugs", "internal/harness/memredis", "internal/seam", "leadership", "redlock"},
	"internal/harness/childproc":               nil,
	"internal/harness/childproc/childproctest": {"internal/harness/childproc"},
	"internal/harness/redisserver":             {"internal/harness/childproc"},
	"internal/harness/pgserver":                {"internal/harness/childproc"},
	"internal/harness/redistest":               {"internal/harness/childproc/childproctest", "internal/harness/redisserver"},
	"internal/harness/pgtest":                  {"internal/harness/childproc/childproctest", "internal/harness/pgserver"},
	"internal/harness/faultproxy":              nil,
	"internal/harness/critical":                nil,
	"internal/harness/clockshim":               {"internal/harness/childproc"},
	"internal/layering":                        nil,
	"model":                                    nil, // the SPIN models' test

	// MariaDB servers, for the tests of the database/sql guard.
	"internal/harness/mariadbserver":             {"internal/harness/childproc"},
	"internal/harness/mariadbserver/mariadbtest": {"internal/harness/childproc/childproctest", "internal/harness/mariadbserver"},
}

// library are the packages a user's program links: no Redis client but
// through an adapter, no test harness.
var library = []string{"driver", "fence", "fence/pgfence", "fence/sqlfence", "fence/internal/fragment", "redlock", "redlock/check", "redlock/redlockprom", "leadership",
	"redlock/internal/push", "redlock/internal/fair", "redlock/internal/watch", "redlock/internal/retry", "redlock/internal/node",
	"redlock/internal/wait", "redlock/internal/plain", "internal/names", "internal/nilcheck", "quorum", "clockdrift", "internal/bounded", "internal/boottime", "internal/bugs", "fence/internal/rejection"}

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "quorumlock.dev/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, imports := strings.TrimPrefix(fields[0], mod), fields[1:]
		want, known := allowed[pkg]
		if !known {
			t.Errorf("%s is not in the layering table: add it, with the project packages it may import", pkg)
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(pkg, "driver/") && !strings.HasPrefix(pkg, "driver/drivertest") && !strings.HasPrefix(pkg, "driver/internal/") && strings.HasPrefix(imp, mod) && imp != mod+"driver" {
				t.Errorf("%s, a driver adapter, imports %s: adapters import only the seam, quorumlock.dev/driver", pkg, imp)
			}
			if p, ours := strings.CutPrefix(imp, mod); ours && !slices.Contains(want, p) {
				t.Errorf("%s imports %s, which the layering table does not allow", pkg, p)
			}
			if slices.Contains(library, pkg) && strings.HasPrefix(imp, mod+"internal/harness/") {
				t.Errorf("%s, a library package, imports the test harness %s", pkg, imp)
			}
			if slices.Contains(library, pkg) && strings.HasPrefix(imp, "github.com/redis/") {
				t.Errorf("%s, a library package, imports the Redis client %s: only driver adapters may", pkg, imp)
			}
		}
	}
}

// The table is acyclic: following allowed imports never comes back to the
// package it started from.
func TestLayeringAcyclic(t *testing.T) {
	var visit func(p string, path []string)
	visit = func(p string, path []string) {
		if slices.Contains(path, p) {
			t.Fatalf("cycle in the layering table: %s -> %s", strings.Join(path, " -> "), p)
		}
		for _, q := range allowed[p] {
			visit(q, append(path, p))
		}
	}
	for p := range allowed {
		visit(p, nil)
	}
}

package releasecheck

import (
	"bytes"
	"context"
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/semver"

	"quorumlock.dev/cmd/redlock-bench/internal/doccheck"
	"quorumlock.dev/internal/harness/childproc/childproctest"
	"quorumlock.dev/internal/harness/redisserver"
	"quorumlock.dev/internal/harness/redistest"
)

// root is the repository's root, from this package's directory.
const root = "../../../.."

// release returns the version at which the modules of the checkout require one another, and
// fails t unless they all use one version, a release, and no go.mod replaces anything: a
// replace applies only in its own module, so its users would build what its tests never did.
func release(t *testing.T) (string, []Module) {
	t.Helper()
	mods, err := Modules(root)
	require.NoError(t, err)
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.Path] = true
	}
	versions := map[string][]string{} // version: the requirements at it
	for _, m := range mods {
		for _, r := range m.GoMod.Replace {
			t.Errorf("%s/go.mod replaces %s: a replace applies only in its own module (use the repository's go.work)", m.Dir, r.Old.Path)
		}
		for _, r := range m.GoMod.Require {
			if ours[r.Mod.Path] {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], m.Path+" requires "+r.Mod.Path)
			}
		}
	}
	require.Len(t, versions, 1, "the modules of this repository require one another at one version, the next release: %v", versions)
	var v string
	for v = range versions {
	}
	require.True(t, semver.IsValid(v) && semver.Prerelease(v) == "" && semver.Build(v) == "" && v != "v0.0.0",
		"%s is not a release version (vX.Y.Z): %v", v, versions[v])
	return v, mods
}

// The modules of the checkout require one another at the version they will be released at.
func TestRequirementsAreOneRelease(t *testing.T) {
	v, mods := release(t)
	assert.Greater(t, len(mods), 1, "found only the root module")
	t.Logf("release %s of %d modules", v, len(mods))
}

// A program outside the repository installs the modules with the README's go get lines from a
// module proxy that serves this checkout at the release version, with no replace and no
// network (third-party modules come from the module cache), and the README's quick start,
// fenced write and rueidis variant build and run against redis-server.
//
// The go commands use the machine's module cache, so that go-redis, rueidis and their
// dependencies sit in the directories the rest of the suite builds them from, and the programs
// build with -race ([buildPrograms]): on a cold CI machine only this repository's packages are
// compiled here. The checkout served as a release is taken out of that module cache before and
// after the test ([removeRelease]).
func TestInstallAsREADMESays(t *testing.T) {
	v, mods := release(t)
	goBin := goCommand(t)
	servers := redistest.StartN(t, 5, redisserver.Options{}) // 3 masters, a fence counter, a store
	readme := readREADME(t)

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	require.NoError(t, WriteProxy(proxy, root, mods, v, time.Now()))
	cache := goEnv(t, goBin, "GOMODCACHE")
	lockModCache(t, cache)
	require.NoError(t, removeRelease(cache), "a run that was killed left this checkout in the module cache")
	t.Cleanup(func() {
		assert.NoError(t, removeRelease(cache), "this checkout, served as a release, is left in the module cache")
	})
	env := testEnv(map[string]string{
		"GOPROXY":    "file://" + proxy + ",file://" + filepath.Join(cache, "cache", "download"),
		"GONOSUMDB":  "quorumlock.dev",
		"GOSUMDB":    "off", // third-party modules come from the module cache, checked when it got them
		"GOFLAGS":    "-mod=mod",
		"GOWORK":     "off",
		"GOMODCACHE": cache,
		// The go command indexes a module of the module cache by its
		// directory alone, trusting that it never changes: the checkout,
		// served at the same version run after run, would be read with the
		// imports of an earlier run's (a new import failed to build with
		// "could not import ... (open : no such file or directory)").
		"GODEBUG": strings.TrimPrefix(os.Getenv("GODEBUG")+",goindex=0", ","),
	})
	app := filepath.Join(tmp, "app")
	require.NoError(t, os.Mkdir(app, 0o755))
	run(t, app, env, goBin, "mod", "init", "example.com/app")

	lines := installLines(readme)
	require.NotEmpty(t, lines, "README.md has no go get line in a sh block")
	installed := map[string]bool{}
	for _, line := range lines {
		args := strings.Fields(line)[1:]
		if args[0] == "install" {
			// Resolve and load every package of the program, as go install does, but do not
			// compile the CLI's ~150 modules, minutes of work on two cores.
			args = slices.Insert(args, 1, "-n")
		}
		run(t, app, env, goBin, args...)
		for _, m := range mods {
			if strings.HasPrefix(args[len(args)-1], m.Path+"@") || strings.HasPrefix(args[len(args)-1], m.Path+"/") {
				installed[m.Path] = true
			}
		}
	}
	for _, m := range mods {
		assert.True(t, installed[m.Path], "README.md has no install line for %s", m.Path)
	}

	quick := block(t, readme, "redlock/quickstart_example_test.go", "Example_minimal")
	fenced := block(t, readme, "redlock/quickstart_example_test.go", "Example_fencedWrite")
	onRueidis := block(t, readme, "driver/rueidisdriver/quickstart_example_test.go", "Example_quickStart")
	writeProgram(t, filepath.Join(app, "quickstart"), goredisMain+quick+"\n"+fenced)
	writeProgram(t, filepath.Join(app, "onrueidis"), rueidisMain+splice(t, quick, onRueidis))
	buildPrograms(t, app, env, goBin, filepath.Join(tmp, "bin"))

	// A program built with -race sleeps a second before it exits, unless told not to.
	env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	masters := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	out := run(t, app, env, filepath.Join(tmp, "bin", "quickstart"),
		"-masters", strings.Join(masters, ","), "-counter", servers[3].Addr(), "-stock", servers[4].Addr())
	assert.Equal(t, "report written\nstock:WH-01 = 99\n", out)
	out = run(t, app, env, filepath.Join(tmp, "bin", "onrueidis"), "-masters", strings.Join(masters, ","))
	assert.Equal(t, "report written\n", out)
	// Unlock returns once a majority released, and the program may end before the last master
	// answered: no lock is left on a majority.
	held := map[string]int{}
	for _, addr := range masters {
		keys, err := redistest.Client(t, addr).Keys(t.Context(), "lock:*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			held[k]++
		}
	}
	for k, n := range held {
		assert.Less(t, n, 2, "%s is left on %d of 3 masters: the programs unlock", k, n)
	}
}

// A program outside the repository builds the quick start from a checkout, in a workspace made
// by the README's go work lines, with the checkout at ../quorumlock.
func TestCheckoutAsREADMESays(t *testing.T) {
	goBin := goCommand(t)
	readme := readREADME(t)
	lines := checkoutLines(readme)
	require.NotEmpty(t, lines, "README.md has no sh block with go work init")

	tmp := t.TempDir()
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, filepath.Join(tmp, "quorumlock")))
	cache := goEnv(t, goBin, "GOMODCACHE")
	env := testEnv(map[string]string{
		"GOPROXY": "file://" + filepath.Join(cache, "cache", "download"),
		"GOSUMDB": "off",
		"GOFLAGS": "-modcacherw",
		"GOWORK":  "", // the go.work the README's lines make
	})
	app := filepath.Join(tmp, "app")
	require.NoError(t, os.Mkdir(app, 0o755))
	run(t, app, env, goBin, "mod", "init", "example.com/app")
	quick := block(t, readme, "redlock/quickstart_example_test.go", "Example_minimal")
	onRueidis := block(t, readme, "driver/rueidisdriver/quickstart_example_test.go", "Example_quickStart")
	fenced := block(t, readme, "redlock/quickstart_example_test.go", "Example_fencedWrite")
	writeProgram(t, filepath.Join(app, "quickstart"), goredisMain+quick+"\n"+fenced)
	writeProgram(t, filepath.Join(app, "onrueidis"), rueidisMain+splice(t, quick, onRueidis))
	for _, line := range lines {
		run(t, app, env, goBin, strings.Fields(line)[1:]...)
	}
	buildPrograms(t, app, env, goBin, filepath.Join(tmp, "bin"))
}

// In the repository's workspace, each nested module builds and tests with the versions its
// go.mod requires, the ones its users get: a workspace selects the highest version that any of
// its modules requires, so a sibling's requirement (the CLI's, etcd's) could otherwise raise a
// dependency that only the workspace sees. The root module needs no workspace; make runs it
// with GOWORK=off.
func TestWorkspaceBuildsWhatUsersGet(t *testing.T) {
	goBin := goCommand(t)
	_, mods := release(t)
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	env := testEnv(map[string]string{"GOWORK": filepath.Join(abs, "go.work"), "GOFLAGS": "", "GOPROXY": "off"})
	for _, m := range mods[1:] {
		required := map[string]string{}
		for _, r := range m.GoMod.Require {
			required[r.Mod.Path] = r.Mod.Version
		}
		out := run(t, filepath.Join(root, m.Dir), env, goBin, "list", "-deps", "-test",
			"-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./...")
		seen := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			path, version, ok := strings.Cut(line, " ")
			if !ok || seen[path] {
				continue
			}
			seen[path] = true
			assert.Equal(t, required[path], version,
				"%s builds %s %s in the workspace and requires %q, which its users build: require %[3]s in its go.mod (README, \"Working on this repository\")",
				m.Dir, path, version, required[path])
		}
	}
}

// goredisMain runs the README's quick start and fenced write: masters, fence counter and store
// from flags.
const goredisMain = `package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"quorumlock.dev/driver"
	"quorumlock.dev/driver/goredis"
	"quorumlock.dev/fence"
	"quorumlock.dev/redlock"
)

func main() {
	masterAddrs := flag.String("masters", "", "")
	counterAddr := flag.String("counter", "", "")
	stockAddr := flag.String("stock", "", "")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs := strings.Split(*masterAddrs, ",")
	if err := nightly(ctx, addrs); err != nil {
		log.Fatal(err)
	}

	var rdbs []*redis.Client
	for _, addr := range addrs {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: addr}))
	}
	counterNode := goredis.Conn(redis.NewClient(&redis.Options{Addr: *counterAddr}))
	stock := goredis.Conn(redis.NewClient(&redis.Options{Addr: *stockAddr}))
	if err := stocktake(ctx, goredis.Masters(rdbs...), counterNode, stock, "WH-01", 99); err != nil {
		log.Fatal(err)
	}
	var guard fence.RedisGuard
	qty, _, err := guard.Get(ctx, stock, "stock:WH-01")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:WH-01 =", qty)
}

var _ = strconv.Itoa
var _ driver.Conn

func writeReport(ctx context.Context) error {
	fmt.Println("report written")
	return ctx.Err()
}

`

// rueidisMain runs the README's quick start on rueidis clients.
const rueidisMain = `package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"quorumlock.dev/driver/rueidisdriver"
	"quorumlock.dev/redlock"
)

func main() {
	masterAddrs := flag.String("masters", "", "")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := nightly(ctx, strings.Split(*masterAddrs, ",")); err != nil {
		log.Fatal(err)
	}
}

var _ rueidis.Client

func writeReport(ctx context.Context) error {
	fmt.Println("report written")
	return ctx.Err()
}

`

// buildPrograms builds the programs quickstart and onrueidis of the module at app into bin, in
// one go command. It builds them with -race, as the suite's go test builds every package: go-redis,
// rueidis and their dependencies, which the root module's and driver/rueidisdriver's race tests built
// from the same module cache, then come from the build cache, and only this repository's packages
// may need compiling. Without cgo, which the race detector needs, it builds them without. It logs
// the packages compiled (-v names them, not those the build cache had).
func buildPrograms(t *testing.T, app string, env []string, goBin, bin string) {
	t.Helper()
	args := []string{"build", "-v", "-o", bin + string(filepath.Separator), "./quickstart", "./onrueidis"}
	if cgo := goEnv(t, goBin, "CGO_ENABLED"); cgo == "1" {
		args = slices.Insert(args, 1, "-race")
	} else {
		t.Logf("CGO_ENABLED=%s: building without -race, which needs cgo, so not from the race tests' build cache", cgo)
	}
	_, compiled := runOutput(t, app, env, goBin, args...)
	t.Logf("compiled, not from the build cache: %s", strings.Join(strings.Fields(compiled), " "))
}

// splice returns the quick start with the lines up to its redlock.New replaced by variant's,
// which end with the variant's redlock.New: the README shows only the lines that change.
func splice(t *testing.T, quick, variant string) string {
	t.Helper()
	lines := strings.Split(quick, "\n")
	sig := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "func ") })
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "redlock.New(") })
	require.True(t, sig >= 0 && end > sig, "the README's quick start has no func with a redlock.New:\n%s", quick)
	v := strings.Split(strings.TrimRight(variant, "\n"), "\n")
	require.Contains(t, v[len(v)-1], "redlock.New(", "the README's variant does not end at its redlock.New:\n%s", variant)
	return strings.Join(slices.Concat(lines[:sig+1], v, lines[end+1:]), "\n")
}

// writeProgram writes a main package into dir; it must parse, or the README's block is not a
// whole function.
func writeProgram(t *testing.T, dir, src string) {
	t.Helper()
	_, err := parser.ParseFile(token.NewFileSet(), "main.go", src, 0)
	require.NoError(t, err, "a program made of the README's blocks does not parse:\n%s", src)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
}

func readREADME(t *testing.T) []doccheck.Block {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	return doccheck.Blocks("README.md", md)
}

// block returns the text of the README's go block copied from runner in source.
func block(t *testing.T, blocks []doccheck.Block, source, runner string) string {
	t.Helper()
	for _, b := range blocks {
		if b.Lang == "go" && b.Source == source && b.Runner == runner {
			return b.Text
		}
	}
	require.FailNow(t, "no go block of README.md is marked <!-- example: "+source+" "+runner+" -->")
	return ""
}

// installLines returns the README's go get and go install lines of this project's modules,
// comments cut.
func installLines(blocks []doccheck.Block) []string {
	var lines []string
	for _, b := range blocks {
		if b.Lang != "sh" {
			continue
		}
		for _, l := range strings.Split(b.Text, "\n") {
			l, _, _ = strings.Cut(l, "#")
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "go get quorumlock.dev") || strings.HasPrefix(l, "go install quorumlock.dev") {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// checkoutLines returns the go commands of the README's sh block that makes a workspace.
func checkoutLines(blocks []doccheck.Block) []string {
	for _, b := range blocks {
		if b.Lang != "sh" || !strings.Contains(b.Text, "go work init") {
			continue
		}
		var lines []string
		for _, l := range strings.Split(b.Text, "\n") {
			l, _, _ = strings.Cut(l, "#")
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "go ") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	return nil
}

// lockModCache holds a lock on the module cache at cache until t ends, so that two runs of
// [TestInstallAsREADMESays] on one machine (two checkouts, two CI jobs) do not take each other's
// checkout from the cache for a release, or remove it under the other's build. The lock is the
// operating system's, released when the process ends however it ends.
func lockModCache(t *testing.T, cache string) {
	t.Helper()
	dir := filepath.Join(cache, "cache")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	f, err := os.OpenFile(filepath.Join(dir, "quorumlock-releasecheck.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() }) // releases the lock
	start := time.Now()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for another run's lock on the module cache", d.Round(time.Millisecond))
	}
}

// removeRelease removes from the module cache at cache every version of this repository's
// modules: what [TestInstallAsREADMESays] put there from its proxy, the checkout as a release,
// must never be taken for one by a later build. The go command makes the directories it
// extracts read-only; they are made writable first.
func removeRelease(cache string) error {
	ours, err := filepath.Glob(filepath.Join(cache, "quorumlock.dev@*"))
	if err != nil {
		return err
	}
	ours = append(ours, filepath.Join(cache, "quorumlock.dev"), filepath.Join(cache, "cache", "download", "quorumlock.dev"))
	var errs []error
	for _, p := range ours {
		err := filepath.WalkDir(p, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.Chmod(p, info.Mode().Perm()|0o700)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		errs = append(errs, os.RemoveAll(p))
	}
	return errors.Join(errs...)
}

// goCommand returns the go command, failing t under CI=true and skipping it elsewhere when
// there is none.
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		childproctest.Missing(t, err, "https://go.dev/dl")
	}
	return p
}

func goEnv(t *testing.T, goBin, name string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", name).Output()
	require.NoError(t, err)
	v := strings.TrimSpace(string(out))
	require.NotEmpty(t, v, "go env %s is empty", name)
	return v
}

// testEnv returns this process's environment with set in place of what it had for those names.
func testEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok && k != "GOPRIVATE" && k != "GONOPROXY" && k != "GOINSECURE" {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return append(env, "GOTOOLCHAIN=local")
}

// run runs name with args in dir and returns its output, failing t with it on an error. Each
// command has two minutes: a first build on a cold build cache compiles go-redis and rueidis.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	stdout, _ := runOutput(t, dir, env, name, args...)
	return stdout
}

// runOutput is run, returning the standard error too.
func runOutput(t *testing.T, dir string, env []string, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var outBuf, errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	require.NoError(t, err, "%s %s in %s:\n%s%s", name, strings.Join(args, " "), dir, outBuf.String(), errBuf.String())
	return outBuf.String(), errBuf.String()
}

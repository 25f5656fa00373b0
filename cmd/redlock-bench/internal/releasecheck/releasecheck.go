// Package releasecheck serves the modules of a checkout as a module proxy would, so that a test
// can install them as the README says, outside the repository, with no replace and no network.
// [WriteProxy] writes every module at one version into a directory in the layout that
// GOPROXY=file://DIR reads: <module>/@v/list, <version>.info, .mod and .zip, each zip made by
// golang.org/x/mod/zip from the files git would commit. It publishes nothing.
package releasecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Module is a Go module of the checkout.
type Module struct {
	Path  string        // its module path
	Dir   string        // its directory, relative to the checkout's root, with slashes ("." for the root)
	GoMod *modfile.File // its go.mod, parsed
	raw   []byte
}

// Modules returns the modules of the checkout at root: the directories that hold a go.mod,
// except under testdata and directories whose names start with a dot or an underscore, which
// the go command ignores too. The root's module comes first.
func Modules(root string) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, raw, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("releasecheck: %s names no module", p)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		mods = append(mods, Module{Path: f.Module.Mod.Path, Dir: filepath.ToSlash(rel), GoMod: f, raw: raw})
		return nil
	})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(mods, func(m Module) bool { return m.Dir == "." })
	if i < 0 {
		return nil, fmt.Errorf("releasecheck: no go.mod at %s", root)
	}
	return slices.Concat(mods[i:i+1], mods[:i], mods[i+1:]), nil
}

// WriteProxy writes every module of mods, as the checkout at root holds it, at version into
// dir, stamped with time t. A module's zip holds the files that git lists for its directory,
// committed or not but never ignored (or, outside a git checkout, every file there), less what
// x/mod/zip leaves out (nested modules, vendored packages, symbolic links); a module in a
// subdirectory without a LICENSE gets the root's, as the go command gives it.
func WriteProxy(dir, root string, mods []Module, version string, t time.Time) error {
	for _, m := range mods {
		if err := writeModule(dir, root, m, version, t); err != nil {
			return fmt.Errorf("releasecheck: %s@%s: %w", m.Path, version, err)
		}
	}
	return nil
}

func writeModule(dir, root string, m Module, version string, t time.Time) error {
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  m.raw,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}

	files, err := moduleFiles(root, m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := zip.Create(&buf, module.Version{Path: m.Path, Version: version}, files); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vdir, version+".zip"), buf.Bytes(), 0o644)
}

// moduleFiles lists m's files for its zip.
func moduleFiles(root string, m Module) ([]zip.File, error) {
	modDir := filepath.Join(root, filepath.FromSlash(m.Dir))
	names, err := gitFiles(root, m.Dir)
	if err != nil {
		// Not a git checkout (or no git): every file, as x/mod/zip reads a directory.
		if !errors.Is(err, errNoGit) {
			return nil, err
		}
		names, err = walkFiles(modDir)
		if err != nil {
			return nil, err
		}
	}
	var files []zip.File
	hasLicense := false
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(modDir, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // tracked, but deleted in the working tree
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{name: name, path: filepath.Join(modDir, filepath.FromSlash(name)), info: fi})
		hasLicense = hasLicense || name == "LICENSE"
	}
	if !hasLicense && m.Dir != "." {
		p := filepath.Join(root, "LICENSE")
		if fi, err := os.Lstat(p); err == nil {
			files = append(files, diskFile{name: "LICENSE", path: p, info: fi})
		}
	}
	return files, nil
}

var errNoGit = errors.New("not a git checkout")

// gitFiles returns the files under dir (relative to root, slashes) that git tracks or would
// add, relative to dir.
func gitFiles(root, dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		return nil, errNoGit
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errNoGit
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w: %s", err, stderr.Bytes())
	}
	seen := map[string]bool{}
	var names []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" {
			continue
		}
		name := p
		if dir != "." {
			var ok bool
			if name, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		if !seen[name] { // a file with a merge conflict is listed once per stage
			seen[name] = true
			names = append(names, path.Clean(name))
		}
	}
	return names, nil
}

func walkFiles(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".svn", ".bzr":
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	return names, err
}

// diskFile is a file of the checkout as x/mod/zip reads one.
type diskFile struct {
	name string
	path string
	info fs.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

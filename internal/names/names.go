// Package names is the one check of the names a caller gives the lock and
// the fence: resources (a lock's, a counter's) and SQL identifiers. A name
// that is empty, too long, not UTF-8, or holds a control character (a NUL,
// a newline) is refused the same way everywhere, and an error quotes at
// most a prefix of it, so that a 1 MiB name does not come back as a 1 MiB
// error. It imports nothing of the project.
package names

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxResource is the longest resource name accepted, in bytes.
const MaxResource = 512

// MaxIdentifier is the longest SQL identifier accepted, in bytes:
// PostgreSQL keeps 63 and silently cuts the rest (NAMEDATALEN - 1); MySQL
// and MariaDB take 64.
const MaxIdentifier = 63

// quoted is how much of a name an error quotes, in bytes.
const quoted = 64

// Resource reports why name cannot name a resource, or nil.
func Resource(name string) error { return check("resource", name, MaxResource) }

// Identifier reports why name cannot be a SQL identifier (one part of a
// dotted name), or nil; what names it in errors (table, column).
func Identifier(what, name string) error { return check(what, name, MaxIdentifier) }

func check(what, name string, max int) error {
	switch {
	case name == "":
		return fmt.Errorf("empty %s", what)
	case len(name) > max:
		return fmt.Errorf("%s %s is longer than %d bytes", what, Quote(name), max)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s %s is not valid UTF-8", what, Quote(name))
	case strings.IndexFunc(name, isControl) >= 0:
		return fmt.Errorf("%s %s has a control character", what, Quote(name))
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Quote is name for an error: quoted, cut to its first 64 bytes (at a
// rune's start) with its length said when longer.
func Quote(name string) string {
	if len(name) <= quoted {
		return fmt.Sprintf("%q", name)
	}
	cut := quoted
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", name[:cut], len(name))
}

// Package fragment reads the SQL fragments (a SET, a WHERE) that the guards
// of pgfence and sqlfence place inside their own statement, the way the
// server's lexer will, and refuses those that could take that statement
// apart: one that closes a parenthesis it did not open (and so takes itself
// out of the "WHERE (<where>) AND fence <= $n" that encloses it), leaves a
// parenthesis, a string, a quoted name or a comment open (which would
// swallow the guard's own text), or holds a statement separator. Inside its
// parentheses a fragment may say anything, a top-level OR included: the
// guard's condition stays outside them. It does not parse SQL, check that a
// fragment is valid, or make one safe to build from input.
package fragment

import (
	"errors"
	"strings"
)

// Syntax is how one server reads the tokens of a fragment.
type Syntax struct {
	dollarQuotes   bool // $tag$...$tag$ strings; $n parameters
	escapeStrings  bool // E'...' with backslash escapes
	nestedComments bool // /* /* */ */ nests
	hashComments   bool // # to the end of the line
	dashNeedsSpace bool // -- starts a comment only before a space or a control character
	backticks      bool // `name`
	brackets       bool // [name]
	// noBackslash refuses a backslash in a quoted token: MySQL reads it as an
	// escape or as itself by the session's sql_mode (NO_BACKSLASH_ESCAPES),
	// so where such a token ends cannot be known from the text alone.
	noBackslash bool
	// noExecutableComments refuses /*! */ and /*M! */, whose text MySQL and
	// MariaDB run as SQL.
	noExecutableComments bool
	// questionParams: ? is a parameter, counted by Check; the numbered and
	// named forms are refused, so that the count says which arguments are
	// whose.
	questionParams bool
	namedParams    bool // :name, @name and $name are parameters (refused with questionParams)
}

// The syntaxes of the servers the guards support.
var (
	// PostgreSQL: strings '...' (E'...' with backslash escapes, $tag$...$tag$),
	// quoted names "...", comments -- and /* */ (nested); parameters $n.
	PostgreSQL = Syntax{dollarQuotes: true, escapeStrings: true, nestedComments: true}
	// MySQL and MariaDB: strings '...' and "...", quoted names `...`,
	// comments #, "-- " and /* */ (not nested); parameters ?.
	MySQL = Syntax{hashComments: true, dashNeedsSpace: true, backticks: true, noBackslash: true,
		noExecutableComments: true, questionParams: true}
	// SQLite: strings '...', quoted names "...", `...` and [...], comments
	// -- and /* */ (not nested); parameters ?.
	SQLite = Syntax{backticks: true, brackets: true, questionParams: true, namedParams: true}
)

// Check reports why fragment s could take apart the statement it is placed
// in, or nil. For a syntax whose parameters are ?, it returns how many s
// holds.
func Check(s string, x Syntax) (params int, err error) {
	depth := 0
	for i := 0; i < len(s); {
		var ok bool
		switch c := s[i]; {
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth == 0 {
				return 0, errors.New("closes a parenthesis it did not open")
			}
			depth--
			i++
		case c == ';':
			return 0, errors.New("holds a statement separator (;)")
		case c == '\'':
			escapes := x.escapeStrings && i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && (i < 2 || !identChar(s[i-2]))
			start := i
			if i, ok = endQuoted(s, i+1, '\'', escapes); !ok {
				return 0, errors.New("leaves a string constant open")
			}
			if err := x.backslash(s[start:i]); err != nil {
				return 0, err
			}
		case c == '"':
			start := i
			if i, ok = endQuoted(s, i+1, '"', false); !ok {
				return 0, errors.New("leaves a quoted name or string open")
			}
			if err := x.backslash(s[start:i]); err != nil {
				return 0, err
			}
		case c == '`' && x.backticks:
			if i, ok = endQuoted(s, i+1, '`', false); !ok {
				return 0, errors.New("leaves a quoted name open")
			}
		case c == '[' && x.brackets:
			end := strings.IndexByte(s[i+1:], ']')
			if end < 0 {
				return 0, errors.New("leaves a quoted name open")
			}
			i += end + 2
		case c == '-' && i+1 < len(s) && s[i+1] == '-' && (!x.dashNeedsSpace || i+2 == len(s) || s[i+2] <= ' '):
			// At the end of s, "--" is a comment too: the guard puts a newline
			// after each fragment.
			i = lineEnd(s, i)
		case c == '#' && x.hashComments:
			i = lineEnd(s, i)
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			if x.noExecutableComments && (strings.HasPrefix(s[i+2:], "!") || strings.HasPrefix(s[i+2:], "M!")) {
				return 0, errors.New("holds an executable comment (/*! */), which the server runs as SQL")
			}
			if i, ok = endComment(s, i+2, x.nestedComments); !ok {
				return 0, errors.New("leaves a comment open")
			}
		case c == '$' && x.dollarQuotes && (i == 0 || !identChar(s[i-1])):
			if i, ok = endDollar(s, i); !ok {
				return 0, errors.New("leaves a dollar-quoted string open")
			}
		case c == '?' && x.questionParams:
			if i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				return 0, errors.New("holds a numbered parameter (?N): use ?, values in order")
			}
			params++
			i++
		case (c == ':' || c == '@' || c == '$') && x.namedParams && (i == 0 || !identChar(s[i-1])) && i+1 < len(s) && identChar(s[i+1]):
			return 0, errors.New("holds a named parameter (" + string(c) + "name): use ?, values in order")
		default:
			i++
		}
	}
	if depth > 0 {
		return 0, errors.New("leaves a parenthesis open")
	}
	return params, nil
}

// backslash refuses a quoted token that holds a backslash, in a syntax
// that reads it by a setting of the session.
func (x Syntax) backslash(token string) error {
	if x.noBackslash && strings.IndexByte(token, '\\') >= 0 {
		return errors.New("holds a backslash in a quoted string or name, which MySQL reads by its sql_mode: pass the value as a parameter")
	}
	return nil
}

// lineEnd is the index of the newline that ends the line comment at i, or
// len(s).
func lineEnd(s string, i int) int {
	if n := strings.IndexByte(s[i:], '\n'); n >= 0 {
		return i + n
	}
	return len(s)
}

// endQuoted is the index after the quote q that ends a quoted token whose
// text starts at i (a doubled q is one q in it; with escapes, a backslash
// escapes the next byte), and false when none does.
func endQuoted(s string, i int, q byte, escapes bool) (int, bool) {
	for i < len(s) {
		switch {
		case escapes && s[i] == '\\':
			i += 2
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i += 2
		case s[i] == q:
			return i + 1, true
		default:
			i++
		}
	}
	return i, false
}

// endComment is the index after the */ that ends a block comment whose
// text starts at i.
func endComment(s string, i int, nested bool) (int, bool) {
	for depth := 1; i+1 < len(s); {
		switch {
		case nested && s[i] == '/' && s[i+1] == '*':
			depth++
			i += 2
		case s[i] == '*' && s[i+1] == '/':
			if depth--; depth == 0 {
				return i + 2, true
			}
			i += 2
		default:
			i++
		}
	}
	return len(s), false
}

// endDollar reads what starts with the $ at i: a parameter ($1) or a lone
// $ goes on at the next byte; $tag$ (tag empty or a name) opens a string
// that the same $tag$ ends, and the index after it is returned.
func endDollar(s string, i int) (int, bool) {
	j := i + 1
	if j < len(s) && s[j] >= '0' && s[j] <= '9' {
		return j, true // a parameter
	}
	for j < len(s) && s[j] != '$' && identChar(s[j]) {
		j++
	}
	if j >= len(s) || s[j] != '$' {
		return i + 1, true // not a dollar quote: the server will say what it is
	}
	tag := s[i : j+1]
	for k := j + 1; k+len(tag) <= len(s); k++ {
		if s[k:k+len(tag)] == tag {
			return k + len(tag), true
		}
	}
	return len(s), false
}

// identChar reports a byte that may continue a name: a letter, digit, _
// or $ (and any byte of a multibyte letter).
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// PostgresUpdate is the guarded update of pgfence.Guard and of sqlfence.Guard on
// PostgreSQL (Update and Claim), for table (1), fence column (2),
// the SET assignments, the fence's last (3), where (4), the fence's placeholder number (5)
// and comparison (6). The checks of why nothing changed run in the same statement, and
// only then (an initplan in an untaken CASE branch never executes): a second statement
// with where alone could not be prepared when set uses a placeholder that where does not,
// since PostgreSQL could not type it. seen reads the statement's snapshot; a NULL fence
// reads as -1, so that such a row still counts as a match. When seen admits the fence,
// a concurrent transaction changed the rows while the update waited for them, and latest
// reads their newest versions (a row lock, in read committed, follows the update chain and
// checks where again): a newer fence there is a rejection, anything else a conflict.
// FOR SHARE, not FOR KEY SHARE, which takes the old version when the update changed no
// key. It runs only on that path, and holds its locks until the transaction ends. A
// newline ends each fragment of the caller, so that a trailing "--" comment in one cannot
// comment out the rest.
const PostgresUpdate = `WITH fenced AS (
	UPDATE %[1]s SET %[3]s
	WHERE (%[4]s
	) AND %[2]s %[6]s $%[5]d
	RETURNING 1
), outcome AS (
	SELECT changed, CASE WHEN changed = 0 THEN (SELECT max(coalesce(%[2]s, -1)) FROM %[1]s WHERE (%[4]s
)) END AS seen
	FROM (SELECT count(*) AS changed FROM fenced) AS c
)
SELECT changed, seen, CASE WHEN seen >= 0 AND seen %[6]s $%[5]d THEN (SELECT max(coalesce(f, -1))
	FROM (SELECT %[2]s AS f FROM %[1]s WHERE (%[4]s
) FOR SHARE) AS l) END
FROM outcome`

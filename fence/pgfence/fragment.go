package pgfence

import "errors"

// A fragment (the SET or WHERE of Guard.Update and Claim) runs as SQL
// inside the guard's own statement, so that its parentheses enclose it:
// "WHERE (<where>) AND <fence> <= $N". One that closes a parenthesis it did
// not open takes itself out of them, and the fence check with it: with
// "sku = $2) OR (sku = $2" a stale holder's write matched by the first
// half lands whatever its fence. checkFragment refuses such a fragment
// before anything is sent. It reads the fragment as PostgreSQL's lexer
// would: parentheses inside string constants ('...', E'...' with its
// backslash escapes, $tag$...$tag$), quoted names ("...") and comments
// (-- to the end of the line, /* */ nested) do not count, and one of those
// left open is refused too, since it would swallow the guard's text.

// checkFragment reports why fragment s could take the statement's own text
// apart, or nil.
func checkFragment(s string) error {
	depth := 0
	for i := 0; i < len(s); {
		var ok bool
		switch c := s[i]; {
		case c == '(':
			depth++
			i++
			continue
		case c == ')':
			if depth == 0 {
				return errors.New("closes a parenthesis it did not open")
			}
			depth--
			i++
			continue
		case c == '\'':
			escapes := i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && (i < 2 || !identChar(s[i-2]))
			i, ok = endQuoted(s, i+1, '\'', escapes)
			if !ok {
				return errors.New("leaves a string constant open")
			}
		case c == '"':
			if i, ok = endQuoted(s, i+1, '"', false); !ok {
				return errors.New("leaves a quoted name open")
			}
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			if i, ok = endComment(s, i+2); !ok {
				return errors.New("leaves a comment open")
			}
		case c == '$' && (i == 0 || !identChar(s[i-1])):
			if i, ok = endDollar(s, i); !ok {
				return errors.New("leaves a dollar-quoted string open")
			}
		default:
			i++
		}
	}
	if depth > 0 {
		return errors.New("leaves a parenthesis open")
	}
	return nil
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
// text starts at i; block comments nest.
func endComment(s string, i int) (int, bool) {
	for depth := 1; i+1 < len(s); {
		switch {
		case s[i] == '/' && s[i+1] == '*':
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
		return i + 1, true // not a dollar quote: PostgreSQL will say what it is
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

package pgfence

import "quorumlock.dev/fence/internal/fragment"

// A fragment (the SET or WHERE of Guard.Update and Claim) runs as SQL
// inside the guard's own statement, so that its parentheses enclose it:
// "WHERE (<where>) AND <fence> <= $N". One that closes a parenthesis it did
// not open takes itself out of them, and the fence check with it: with
// "sku = $2) OR (sku = $2" a stale holder's write matched by the first
// half lands whatever its fence. checkFragment refuses such a fragment
// before anything is sent, reading it as PostgreSQL's lexer would (the
// rules, shared with package sqlfence, are in fence/internal/fragment).

// checkFragment reports why fragment s could take the statement's own text
// apart, or nil.
func checkFragment(s string) error {
	_, err := fragment.Check(s, fragment.PostgreSQL)
	return err
}

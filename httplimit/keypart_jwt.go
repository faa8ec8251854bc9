package httplimit

import (
	"fmt"
	"strings"
)

// SourceJWT is the "jwt:CLAIM" key part: a claim of the request's verified
// bearer token (Options.Identity).
const SourceJWT Source = 9

// JWT is the key part of a claim of the request's verified bearer token,
// such as JWT("sub"): see Options.Identity. A request without a token that
// verifies, or whose token lacks the claim (or holds an array or object
// there), does not have it.
func JWT(claim string) KeyPart { return KeyPart{Source: SourceJWT, Name: claim} }

func init() {
	register(SourceJWT, &keySource{
		name:  "jwt",
		tag:   'j',
		named: true,
		checkName: func(name string) error {
			if name == "" || len(name) > 256 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				return fmt.Errorf("claim name %q must be 1 to 256 bytes without control characters", name)
			}
			return nil
		},
		value:   func(q *request, name string) (string, bool) { return q.claim(name) },
		notList: "lists are looked up before any token is verified",
	})
}

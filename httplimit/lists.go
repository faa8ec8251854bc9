package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
)

// AddrSet is a set of client addresses, such as *accesslist.IPSet.
// Contains must be safe for concurrent use and should not allocate.
type AddrSet interface {
	Contains(netip.Addr) bool
}

// KeySet is a set of request attribute values (API keys, user IDs), such
// as *accesslist.KeySet. Contains must be safe for concurrent use and
// should not allocate.
type KeySet interface {
	Contains(string) bool
}

// List is a named allow or deny list: a set of client addresses, or a set
// of values of a request attribute. A client is on the list when its
// address, as the "ip" key part finds it (Options.ClientIP: behind trusted
// proxies, the forwarded address; not masked to a prefix), is in Addrs, or
// when the request's Key attribute is in Keys.
//
// Use a List in a Rule's Allow (the rule does not apply to listed clients)
// or in Options.Deny (listed clients are refused with 403 Forbidden).
type List struct {
	// Name identifies the list in metrics and logs: 1 to 64 characters
	// from A-Z a-z 0-9 . _ -. Required.
	Name string
	// Addrs, if set, holds the listed client addresses.
	Addrs AddrSet
	// Key is the request attribute looked up in Keys, such as
	// Header("X-Api-Key"). Required with Keys; it cannot be "ip" (use
	// Addrs) or "global".
	Key KeyPart
	// Keys, if set, holds the listed values of Key. A request without the
	// attribute is not on the list.
	Keys KeySet
}

func (li *List) validate() error {
	if li == nil {
		return fmt.Errorf("%w: nil list", ErrInvalidRule)
	}
	if err := CheckName("list", li.Name); err != nil {
		return err
	}
	switch {
	case li.Addrs == nil && li.Keys == nil:
		return fmt.Errorf("%w: list %q has neither addresses nor keys", ErrInvalidRule, li.Name)
	case li.Keys != nil:
		if err := li.Key.validate(); err != nil {
			return fmt.Errorf("list %q: %w", li.Name, err)
		}
		if why := li.Key.source().notList; why != "" {
			return fmt.Errorf("%w: list %q: keys cannot be looked up by %s: %s", ErrInvalidRule, li.Name, li.Key, why)
		}
	case li.Key != (KeyPart{}):
		return fmt.Errorf("%w: list %q: a key attribute is only for keys", ErrInvalidRule, li.Name)
	}
	return nil
}

// onList returns the first of lists that the request's client is on, or nil.
func onList(lists []*List, q *request) *List {
	for _, li := range lists {
		if li.Addrs != nil {
			// No address: on no address list.
			if a := q.clientAddr(); a.IsValid() && li.Addrs.Contains(a) {
				return li
			}
		}
		if li.Keys != nil {
			if v, ok := li.Key.value(q); ok && li.Keys.Contains(v) {
				return li
			}
		}
	}
	return nil
}

// forbid answers a deny-listed request 403 Forbidden with a problem
// details body. The body does not name the list: a client learns only that
// it is refused.
func (l *Limiter) forbid(w http.ResponseWriter) {
	const body = `{"type":"about:blank","title":"Forbidden","status":403,"detail":"The client is not allowed to use this service."}` + "\n"
	h := w.Header()
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(body))
}

// allListed reports whether every rule that matched was skipped for an
// allow list: the request's outcome is then OutcomeAllowListed.
func allListed(es []RuleEvent) bool {
	for i := range es {
		if es[i].Outcome != OutcomeAllowListed {
			return false
		}
	}
	return len(es) > 0
}

package rls

import "github.com/sluicehq/sluice/descriptor"

// Rules is what the service needs of a rule tree: the limit that applies to
// each descriptor of a request. *descriptor.Set is the implementation;
// it is immutable once handed to the service and safe for concurrent use,
// and a reload builds a new Service with a new one (see Current).
type Rules interface {
	// HasDomain reports whether the tree has rules for domain.
	HasDomain(domain string) bool
	// Match returns the limit that applies to one descriptor of a request
	// for domain; its Rule is nil when none does.
	Match(domain string, entries []descriptor.Entry) descriptor.Match
	// Override returns the match for a descriptor that carries its own
	// limit, requestsPerUnit per unit; an invalid unit is an error.
	Override(domain string, entries []descriptor.Entry, requestsPerUnit uint32, unit descriptor.Unit) (descriptor.Match, error)
	// Denied reports whether an entry of the descriptor carries a value
	// on a deny list, and the list's name.
	Denied(entries []descriptor.Entry) (string, bool)
	// AllowListedBy reports whether an entry of the descriptor carries a
	// value on an allow list, and the list's name.
	AllowListedBy(entries []descriptor.Entry) (string, bool)
}

var _ Rules = (*descriptor.Set)(nil)

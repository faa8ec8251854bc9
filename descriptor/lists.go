package descriptor

import (
	"errors"
	"fmt"
)

// Values is a set of descriptor entry values, such as an
// accesslist.KeySet, or addresses parsed from the values. Contains must be
// safe for concurrent use.
type Values interface {
	Contains(value string) bool
}

// List is an allow or a deny list of the values of one descriptor entry
// key, across every domain of a Set (see Set.WithLists).
type List struct {
	// Name names the list in metrics and logs. Required.
	Name string
	// Key is the entry key whose values are looked up, such as
	// remote_address. Required.
	Key string
	// Deny makes it a deny list: a request with a descriptor that carries
	// a listed value is refused before anything is counted (Set.Denied).
	// Otherwise it is an allow list: a descriptor that carries a listed
	// value is not limited (Set.AllowListedBy).
	Deny bool
	// Values holds the listed values. Required.
	Values Values
}

// lists are a Set's lists, by entry key, deny lists first.
type lists map[string][]List

// WithLists returns a Set with s's domains and the given lists, in place
// of any s had; s is left as it was. The lists are consulted by Denied and
// AllowListedBy, by the entry key of each entry: one map lookup per entry,
// and one lookup in each list of that key, whatever their sizes. Errors,
// for a list without a name, key or values, wrap ErrInvalid.
func (s *Set) WithLists(ls ...List) (*Set, error) {
	out := &Set{domains: s.domains}
	var errs []error
	for i, l := range ls {
		if l.Name == "" || l.Key == "" || l.Values == nil {
			errs = append(errs, fmt.Errorf("%w: list %d (%q) needs a name, an entry key and values", ErrInvalid, i, l.Name))
			continue
		}
		if out.lists == nil {
			out.lists = lists{}
		}
		if l.Deny {
			out.lists[l.Key] = append([]List{l}, out.lists[l.Key]...)
		} else {
			out.lists[l.Key] = append(out.lists[l.Key], l)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Lists returns the Set's lists, in no particular order.
func (s *Set) Lists() []List {
	var out []List
	for _, ls := range s.lists {
		out = append(out, ls...)
	}
	return out
}

// Denied reports whether an entry of the descriptor carries a value on a
// deny list, and the first such list's name. It does not allocate.
func (s *Set) Denied(entries []Entry) (string, bool) {
	return s.listed(entries, true)
}

// AllowListedBy reports whether an entry of the descriptor carries a value
// on an allow list (the descriptor is then not limited), and the first
// such list's name. It does not allocate.
func (s *Set) AllowListedBy(entries []Entry) (string, bool) {
	return s.listed(entries, false)
}

func (s *Set) listed(entries []Entry, deny bool) (string, bool) {
	if len(s.lists) == 0 {
		return "", false
	}
	for _, e := range entries {
		for _, l := range s.lists[e.Key] {
			if l.Deny == deny && l.Values.Contains(e.Value) {
				return l.Name, true
			}
		}
	}
	return "", false
}

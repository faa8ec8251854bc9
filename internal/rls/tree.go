package rls

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Rules is what the service needs of a rule tree: the limit that applies to
// each descriptor of a request. Implementations are immutable once handed
// to the service and safe for concurrent use; a reload hands in a new one
// (Service.SetRules).
type Rules interface {
	// HasDomain reports whether the tree has rules for domain.
	HasDomain(domain string) bool
	// Match returns the limit that applies to one descriptor of a request
	// for domain; its Rule is nil when none does.
	Match(domain string, entries []Entry) Match
	// Override returns the match for a descriptor that carries its own
	// limit, requestsPerUnit per unit; an invalid unit is an error.
	Override(domain string, entries []Entry, requestsPerUnit uint32, unit Unit) (Match, error)
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Unit is the unit of an Envoy rate limit, with the values of the
// RateLimitResponse.RateLimit.Unit enum of rls.proto (v3).
type Unit int32

// Valid reports whether u is one of the seven units.
func (u Unit) Valid() bool { return u >= 1 && u <= 7 }

// Display is one limit of a rule as the protocol shows it in current_limit.
type Display struct {
	Count           int64
	Period          time.Duration
	RequestsPerUnit uint32
	Unit            Unit
}

// Rule is the limit of one node of a rule tree.
type Rule struct {
	Domain   string
	Name     string
	Replaces []string
	// Policy decides the rule's requests; nil when Unlimited or DenyAll.
	Policy             *sluice.Policy
	Unlimited, DenyAll bool
	ShadowMode         bool
	// MetricKey is the node's configured path, the name its metrics carry.
	MetricKey string
	// Displays holds one entry per limit of Policy (one for DenyAll).
	Displays []Display
}

// Match is the limit that applies to one descriptor: Rule (nil when none)
// and the counter key under Rule.Policy.
type Match struct {
	Rule     *Rule
	Key      string
	Replaced bool
}

// ApplyReplaces drops the matched rules that another matched rule of the
// same request replaces.
func ApplyReplaces(ms []Match) {
	for i := range ms {
		r := ms[i].Rule
		if r == nil || r.Name == "" || r.Unlimited {
			continue
		}
	search:
		for j := range ms {
			o := ms[j].Rule
			if o == nil || j == i {
				continue
			}
			for _, name := range o.Replaces {
				if name == r.Name {
					ms[i].Replaced = true
					break search
				}
			}
		}
	}
	for i := range ms {
		if ms[i].Replaced {
			ms[i].Rule = nil
		}
	}
}

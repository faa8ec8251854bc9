package rls

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Observer receives every request the service answers, for metrics and
// logs. Observe is called synchronously on the request's goroutine, so it
// must be fast and safe for concurrent use, and must not keep e or its
// slices after it returns.
type Observer interface {
	Observe(ctx context.Context, e *Event)
}

// Code is a request's answer, for metrics.
type Code string

// The answers.
const (
	CodeOK        Code = "ok"
	CodeOverLimit Code = "over_limit"
	CodeDenied    Code = "denied"      // OVER_LIMIT for a value on a deny list
	CodeInvalid   Code = "invalid"     // INVALID_ARGUMENT
	CodeError     Code = "unavailable" // the store failed (or decided by its failure policy under FailUnavailable)
)

// Outcome is what became of one descriptor.
type Outcome string

// The outcomes.
const (
	OutcomeAllowed       Outcome = "allowed"        // within its limit (charged unless hits_addend was 0)
	OutcomeLimited       Outcome = "limited"        // over its limit: the request is OVER_LIMIT
	OutcomeShadowLimited Outcome = "shadow_limited" // over a shadow-mode limit: reported, not enforced
	OutcomeSkipped       Outcome = "skipped"        // within its limit, but another descriptor rejected the request: not charged
	OutcomeUnlimited     Outcome = "unlimited"      // an unlimited rule
	OutcomeNoRule        Outcome = "no_rule"        // no limit applies: no match, or an allow-list entry
	OutcomeReplaced      Outcome = "replaced"       // its rule was replaced by another of the request's
	OutcomeError         Outcome = "error"          // the store failed
	OutcomeDenied        Outcome = "denied"         // the request carries a value on a deny list: OVER_LIMIT, nothing counted
	OutcomeAllowListed   Outcome = "allow_listed"   // the descriptor carries a value on an allow list: not limited, not counted
)

// Event describes one request.
type Event struct {
	// Domain is the request's domain when the rule tree knows it, else
	// empty: a label never carries a value a caller made up.
	Domain string
	// Code is the answer.
	Code Code
	// Descriptors holds one entry per descriptor of the request, in order;
	// empty for an invalid request.
	Descriptors []DescriptorEvent
	// Latency is the time spent deciding.
	Latency time.Duration
	// Err is why the request failed (CodeInvalid, CodeError), else nil.
	Err error
	// DeniedBy is the deny list that refused the request (CodeDenied),
	// else empty.
	DeniedBy string
}

// DescriptorEvent describes one descriptor's decision.
type DescriptorEvent struct {
	// Name is the rule's configured name (its path in the tree, such as
	// "messaging.message_type.to_number"), never a value from the request;
	// empty when no rule applies.
	Name string
	// Outcome is what became of the descriptor.
	Outcome Outcome
	// Key is the descriptor's counter key (its domain, entries and
	// values) when a limit applied, else empty. It may identify a person:
	// log it only in a non-reversible form, and never as a metric label.
	Key string
	// Hits is the descriptor's cost.
	Hits int64
	// Decision is the store's decision; zero when none was asked for.
	// Decision.Degraded reports a decision of the store's failure policy.
	Decision sluice.Decision
	// AllowList is the allow list that exempted the descriptor
	// (OutcomeAllowListed), else empty.
	AllowList string
}

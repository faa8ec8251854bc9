package httplimit

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
)

// Action says what a rule does with a request over its limit.
type Action uint8

// The actions, by their configuration names.
const (
	// Reject answers 429 Too Many Requests. The default.
	Reject Action = iota
	// Delay holds the request until its turn comes (the leaky bucket as a
	// queue), for at most the rule's MaxDelay; a request whose turn is
	// further away is rejected at once. Needs token_bucket or gcra.
	Delay
	// Shadow counts, logs and measures the request like Reject would, but
	// never blocks it: for rolling out a new limit safely.
	Shadow
	// Soft never blocks either; a request over the limit reaches the
	// handler with the rule's name in the over-limit request header, so
	// that the application can serve a cheaper answer.
	Soft
	// Exempt lets a matching request through without checking any rule,
	// including rules listed before it.
	Exempt
)

var actionNames = [...]string{Reject: "reject", Delay: "delay", Shadow: "shadow", Soft: "soft", Exempt: "exempt"}

// String returns the configuration name, such as "reject".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// ParseAction returns the action with the given configuration name.
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if strings.EqualFold(s, n) {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown action %q (want reject, delay, shadow, soft or exempt)", ErrInvalidRule, s)
}

// Missing says what a rule does with a request that lacks a part of its key
// (no such header, query parameter or cookie, or an empty one).
type Missing uint8

const (
	// MissingIP uses the client's IP address in place of the missing part,
	// so that a client cannot escape a limit by leaving the header out, and
	// clients without it do not all share (and exhaust) one counter. The
	// default.
	MissingIP Missing = iota
	// MissingSkip does not apply the rule to the request. Only safe when
	// something in front (an authentication layer) guarantees the part.
	MissingSkip
)

var missingNames = [...]string{MissingIP: "ip", MissingSkip: "skip"}

// String returns the configuration name, such as "ip".
func (m Missing) String() string {
	if int(m) < len(missingNames) {
		return missingNames[m]
	}
	return fmt.Sprintf("missing(%d)", m)
}

// ParseMissing returns the Missing with the given configuration name.
func ParseMissing(s string) (Missing, error) {
	for i, n := range missingNames {
		if strings.EqualFold(s, n) {
			return Missing(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown missing-key behaviour %q (want ip or skip)", ErrInvalidRule, s)
}

// Match selects the requests a rule applies to. Every non-empty field must
// match; an empty Match matches every request.
type Match struct {
	// Paths are exact paths ("/login"), or prefixes ending in "/*"
	// ("/api/export/*" matches "/api/export" and everything below it; "/*"
	// matches every path). The request's cleaned URL path is compared, so
	// "/api//export/../search" counts as "/api/search", and in lower case
	// unless Options.CaseSensitivePaths is set, so "/LOGIN" counts as
	// "/login".
	Paths []string
	// Methods are HTTP methods, compared case-sensitively as HTTP requires.
	Methods []string
	// Hosts are host names without ports, compared case-insensitively; a
	// leading "*." matches any subdomain ("*.example.com" matches
	// "api.example.com" but not "example.com").
	Hosts []string
}

// Rule is one rate limit applied to the requests it matches.
type Rule struct {
	// Name identifies the rule in headers, metrics and logs, and is its key
	// space: two rules never share counters. 1 to 64 characters from
	// A-Z a-z 0-9 . _ - and unique within a Limiter. Required.
	Name string
	// Match selects the requests the rule applies to.
	Match Match
	// Action is what happens to a request over the limit. Default Reject.
	Action Action
	// Key lists the parts of the rule's composite key. Empty means IP.
	// Ignored for Exempt.
	Key []KeyPart
	// Missing says what happens when a request lacks a key part.
	Missing Missing
	// Limit is the limit for the default tier. Required unless Exempt.
	Limit sluice.Limit
	// Tiers overrides Limit for named tiers (see Options.Tier).
	Tiers map[string]sluice.Limit
	// MaxDelay is, for Delay, the longest a request waits for its turn.
	// Required for Delay, at most sluice.MaxWait; must be zero otherwise.
	MaxDelay time.Duration
	// Count, if set, makes a Reject rule count only the requests whose
	// response matches it (failed logins, say); nil counts every request.
	// In the default mode, concurrent requests of one key in flight at
	// once can exceed the limit by at most their number; see CountMode.
	Count *CountOn
	// Allow lists the clients the rule does not apply to (monitoring,
	// partners): a request from a client on one of these lists is neither
	// counted nor limited by the rule (its RuleEvent has OutcomeAllowListed
	// and the list's name); the other rules still apply. Not for Exempt
	// rules.
	Allow []*List
	// Penalty, if set, blocks keys that keep exceeding the rule's limit,
	// for longer on every offence (see sluice.Penalty): a blocked key's
	// requests are refused until the block ends, and charged nothing. Each
	// tier keeps its own offences. Not for Exempt or Delay rules; a
	// client override's limit (NewClientOverride) carries no penalty.
	Penalty *sluice.Penalty
	// Sync is how a store shared between processes keeps the rule's
	// counters in step (see sluice.Policy.WithSync): exact (the zero
	// value), quota leases, or async counts. It applies to the rule's
	// limit and every tier's, which must then be token_bucket, gcra or
	// fixed_window (not calendar quotas); not with Penalty nor for
	// concurrency rules. In-process stores decide every mode exactly.
	Sync sluice.Sync
	// Concurrency, if set, makes the rule a concurrency rule: it limits
	// how many matching requests per key are in flight at once. Such a
	// rule takes Match, Key, Missing, Allow and an Action of Reject or
	// Delay (with MaxDelay, the longest a request waits for a free slot),
	// and no Tiers, Count, Penalty or Sync. Without a Limit it adds no
	// rate-limit headers to the responses it admits; its 429s carry
	// RateLimit-Policy with qu="concurrent-requests".
	//
	// With a Limit too, the rule limits both, decided together in one
	// atomic step (sluice.Concurrency.AcquireTake: one script call on
	// Redis): the rate is charged only if a slot is free, and a slot is
	// taken only if the rate admits the request. Its admitted responses
	// carry the rate's headers, as a rate rule's do; a 429 for the rate
	// carries the rate's, a 429 for the slots the concurrency headers.
	// With Delay, a request refused by either waits, asking again, up to
	// MaxDelay; the Limit then need not be a bucket.
	Concurrency *ConcurrencyRule
	// Enforce, if set, enforces the rule on only a share of its keys,
	// chosen by the key as the rule charges it (see RuleKey) and salted
	// with the rule's Name (see sluice.Rollout): on the other keys the
	// rule acts as a Shadow rule, charged on the same counters as
	// enforced keys but never blocking, reported as OutcomeShadowLimited
	// when over the limit, with Shadow as its RuleEvent's Action. The
	// share is not part of the rule's limits, so changing it keeps every
	// counter. A client's own limit (Options.Overrides) changes what its
	// key is limited to, not whether it is enforced. Nil enforces every
	// key. Only for Reject rules that are not concurrency rules.
	Enforce *sluice.Rollout
}

// ConcurrencyRule is the limit of a concurrency rule (Rule.Concurrency).
type ConcurrencyRule struct {
	// Limit is the most requests per key in flight at once: 1 to
	// sluice.MaxConcurrency. For an adaptive rule it is the fleet limit
	// (see Adaptive), 0 for none.
	Limit int64
	// Lease is how long a slot stays taken if the process dies before the
	// request ends (a request releases its slot when it ends, however
	// long it ran): sluice.MinLease to sluice.MaxLease. Choose it longer
	// than the slowest response. For an adaptive rule, only with a fleet
	// limit.
	Lease time.Duration
	// Adaptive, if set, makes the rule an adaptive concurrency rule: the
	// requests it matches are admitted under the limiter's limit, which
	// follows the upstream's latency (see package adaptive), each in the
	// class Options.Priority gives it, waiting in the limiter's queue up
	// to its MaxWait; a request shed is answered 503 Service Unavailable
	// with Retry-After and a problem document of type
	// temporary-reduced-capacity (Event.Outcome OutcomeShed), without
	// rate-limit headers. The rule applies once the rate rules have
	// admitted the request (and any delay is over), as other concurrency
	// rules do: a shed request stays charged to the rate rules, which
	// count a client's attempts, and gives back what Delay rules
	// reserved. The limiter is one for the whole
	// rule: the rule takes no Key, no rate Limit, Action Reject and no
	// MaxDelay. With Limit (and Lease) too, the requests also need a slot
	// of their class's share of Limit across every process that shares
	// the store (adaptive.Fleet, named after the rule). Admitted
	// responses carry no rate-limit headers for it. Give each Limiter
	// its own adaptive.Limiter, or one shared with WithOptions across a
	// configuration reload.
	Adaptive *adaptive.Limiter
}

// Validate checks everything about the rule that does not depend on other
// rules (New also checks that names are unique). Errors wrap ErrInvalidRule
// or sluice.ErrInvalidLimit and name the offending value.
func (r *Rule) Validate() error {
	if err := CheckName("rule", r.Name); err != nil {
		return err
	}
	if int(r.Action) >= len(actionNames) {
		return fmt.Errorf("%w: rule %q: unknown action %d", ErrInvalidRule, r.Name, r.Action)
	}
	if int(r.Missing) >= len(missingNames) {
		return fmt.Errorf("%w: rule %q: unknown missing-key behaviour %d", ErrInvalidRule, r.Name, r.Missing)
	}
	if err := r.Match.validate(fmt.Sprintf("rule %q", r.Name)); err != nil {
		return err
	}
	for _, li := range r.Allow {
		if err := li.validate(); err != nil {
			return fmt.Errorf("rule %q: allow: %w", r.Name, err)
		}
	}
	if r.Action == Exempt {
		if len(r.Allow) > 0 {
			return fmt.Errorf("%w: rule %q: an exempt rule takes no allow lists", ErrInvalidRule, r.Name)
		}
		if len(r.Key) > 0 || r.Limit != (sluice.Limit{}) || len(r.Tiers) > 0 || r.MaxDelay != 0 || r.Count != nil || r.Penalty != nil || r.Enforce != nil || r.Sync != (sluice.Sync{}) {
			return fmt.Errorf("%w: rule %q: an exempt rule takes no key, limit, tiers, max delay, count, penalty, enforce or sync", ErrInvalidRule, r.Name)
		}
		return nil
	}
	if err := r.validateEnforce(); err != nil {
		return err
	}
	for _, k := range r.Key {
		if err := k.validate(); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	if r.Concurrency != nil {
		return r.validateConcurrency()
	}
	check := func(tier string, l sluice.Limit) error {
		where := ""
		if tier != "" {
			where = fmt.Sprintf(" tier %q", tier)
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("rule %q%s: %w", r.Name, where, err)
		}
		if r.Action == Delay && !l.Algorithm.IsBucket() {
			return fmt.Errorf("%w: rule %q%s: action delay needs algorithm token_bucket or gcra, not %s", ErrInvalidRule, r.Name, where, l.Algorithm)
		}
		return nil
	}
	if err := check("", r.Limit); err != nil {
		return err
	}
	for _, t := range sortedKeys(r.Tiers) {
		if err := CheckName("tier", t); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
		if err := check(t, r.Tiers[t]); err != nil {
			return err
		}
	}
	switch {
	case r.Action == Delay && (r.MaxDelay <= 0 || r.MaxDelay > sluice.MaxWait):
		return fmt.Errorf("%w: rule %q: action delay needs a max delay above 0 and at most %v, not %v", ErrInvalidRule, r.Name, sluice.MaxWait, r.MaxDelay)
	case r.Action != Delay && r.MaxDelay != 0:
		return fmt.Errorf("%w: rule %q: max delay is only for action delay", ErrInvalidRule, r.Name)
	}
	if r.Sync.Mode != sluice.SyncExact {
		if err := r.Sync.Validate(); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
		if r.Penalty != nil {
			return fmt.Errorf("%w: rule %q: sync %s is not for a rule with a penalty", ErrInvalidRule, r.Name, r.Sync.Mode)
		}
		limits := []sluice.Limit{r.Limit}
		for _, l := range r.Tiers {
			limits = append(limits, l)
		}
		for _, l := range limits {
			if err := r.Sync.CheckLimit(l); err != nil {
				return fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
	}
	if r.Penalty != nil {
		if r.Action == Delay {
			return fmt.Errorf("%w: rule %q: a penalty is not for action delay", ErrInvalidRule, r.Name)
		}
		if err := r.Penalty.Validate(); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	return r.validateCount()
}

// CheckName returns an error wrapping ErrInvalidRule if name cannot name a
// rule, tier or list (kind says which): it must be 1 to 64 characters from
// A-Z a-z 0-9 . _ -, so that it is safe in metrics, logs, headers and
// Redis key names.
func CheckName(kind, name string) error {
	ok := name != "" && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %s name %q must be 1 to 64 characters from A-Z a-z 0-9 . _ -", ErrInvalidRule, kind, name)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// validate checks the match's paths, methods and hosts; where names its
// rule in errors.
func (m *Match) validate(where string) error {
	for _, p := range m.Paths {
		if !strings.HasPrefix(p, "/") || strings.Contains(p[:len(p)-1], "*") || (strings.HasSuffix(p, "*") && !strings.HasSuffix(p, "/*")) {
			return fmt.Errorf("%w: %s: path %q must start with / and may end in /* (no other wildcards)", ErrInvalidRule, where, p)
		}
	}
	for _, me := range m.Methods {
		if !isToken(me) {
			return fmt.Errorf("%w: %s: method %q is not a valid HTTP method", ErrInvalidRule, where, me)
		}
	}
	for _, h := range m.Hosts {
		if h == "" || strings.ContainsAny(strings.TrimPrefix(h, "*."), "*:/ ") {
			return fmt.Errorf("%w: %s: host %q must be a host name without port, optionally starting with *.", ErrInvalidRule, where, h)
		}
	}
	return nil
}

// matches reports whether the rule applies to r, whose cleaned path is path.
func (m *Match) matches(r *http.Request, path string) bool {
	if len(m.Methods) > 0 && !slices.Contains(m.Methods, r.Method) {
		return false
	}
	if len(m.Paths) > 0 && !slices.ContainsFunc(m.Paths, func(p string) bool { return pathMatches(p, path) }) {
		return false
	}
	if len(m.Hosts) > 0 {
		h := hostOf(r)
		if !slices.ContainsFunc(m.Hosts, func(p string) bool { return hostMatches(p, h) }) {
			return false
		}
	}
	return true
}

func pathMatches(pattern, path string) bool {
	prefix, ok := strings.CutSuffix(pattern, "/*")
	if !ok {
		return pattern == path
	}
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return len(host) > len(suffix)+1 && host[len(host)-len(suffix)-1] == '.' && strings.EqualFold(host[len(host)-len(suffix):], suffix)
	}
	return strings.EqualFold(pattern, host)
}

// validateConcurrency checks a concurrency rule's own fields.
func (r *Rule) validateConcurrency() error {
	c := r.Concurrency
	if c.Adaptive != nil {
		return r.validateAdaptive()
	}
	switch {
	case r.Action != Reject && r.Action != Delay:
		return fmt.Errorf("%w: rule %q: a concurrency rule's action is reject or delay, not %s", ErrInvalidRule, r.Name, r.Action)
	case len(r.Tiers) > 0 || r.Count != nil || r.Penalty != nil || r.Sync != (sluice.Sync{}):
		return fmt.Errorf("%w: rule %q: a concurrency rule takes no tiers, count, penalty or sync", ErrInvalidRule, r.Name)
	case c.Limit < 1 || c.Limit > sluice.MaxConcurrency:
		return fmt.Errorf("%w: rule %q: concurrency %d, want 1 to %d", ErrInvalidRule, r.Name, c.Limit, sluice.MaxConcurrency)
	case c.Lease < sluice.MinLease || c.Lease > sluice.MaxLease:
		return fmt.Errorf("%w: rule %q: lease %v, want %v to %v", ErrInvalidRule, r.Name, c.Lease, sluice.MinLease, sluice.MaxLease)
	case r.Action == Delay && (r.MaxDelay <= 0 || r.MaxDelay > sluice.MaxWait):
		return fmt.Errorf("%w: rule %q: action delay needs a max delay above 0 and at most %v, not %v", ErrInvalidRule, r.Name, sluice.MaxWait, r.MaxDelay)
	case r.Action != Delay && r.MaxDelay != 0:
		return fmt.Errorf("%w: rule %q: max delay is only for action delay", ErrInvalidRule, r.Name)
	}
	if r.Limit != (sluice.Limit{}) {
		if err := r.Limit.Validate(); err != nil {
			return fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	return nil
}

// validateEnforce checks a rule's Enforce.
func (r *Rule) validateEnforce() error {
	switch {
	case r.Enforce == nil:
		return nil
	case r.Concurrency != nil:
		return fmt.Errorf("%w: rule %q: enforce is not for concurrency rules", ErrInvalidRule, r.Name)
	case r.Action != Reject:
		// A delay rule's shadow keys would not wait, so what they report
		// could not tell a wait from a rejection; shadow and soft rules
		// enforce on no key already.
		return fmt.Errorf("%w: rule %q: enforce is for action reject, not %s", ErrInvalidRule, r.Name, r.Action)
	}
	if err := r.Enforce.Validate(); err != nil {
		return fmt.Errorf("%w: rule %q: enforce: %w", ErrInvalidRule, r.Name, err)
	}
	return nil
}

// validateAdaptive checks an adaptive concurrency rule's own fields.
func (r *Rule) validateAdaptive() error {
	c := r.Concurrency
	switch {
	case r.Action != Reject:
		return fmt.Errorf("%w: rule %q: an adaptive concurrency rule's action is reject (requests wait in its limiter's queue), not %s", ErrInvalidRule, r.Name, r.Action)
	case r.MaxDelay != 0:
		return fmt.Errorf("%w: rule %q: an adaptive concurrency rule takes no max delay: requests wait up to its limiter's MaxWait", ErrInvalidRule, r.Name)
	case len(r.Key) > 0:
		return fmt.Errorf("%w: rule %q: an adaptive concurrency rule takes no key: it has one limit for every request it matches", ErrInvalidRule, r.Name)
	case r.Limit != (sluice.Limit{}) || len(r.Tiers) > 0 || r.Count != nil || r.Penalty != nil || r.Sync != (sluice.Sync{}):
		return fmt.Errorf("%w: rule %q: an adaptive concurrency rule takes no rate limit, tiers, count, penalty or sync", ErrInvalidRule, r.Name)
	case c.Limit < 0 || c.Limit > sluice.MaxConcurrency:
		return fmt.Errorf("%w: rule %q: fleet limit %d, want 1 to %d, or 0 for none", ErrInvalidRule, r.Name, c.Limit, sluice.MaxConcurrency)
	case c.Limit > 0 && (c.Lease < sluice.MinLease || c.Lease > sluice.MaxLease):
		return fmt.Errorf("%w: rule %q: lease %v, want %v to %v with a fleet limit", ErrInvalidRule, r.Name, c.Lease, sluice.MinLease, sluice.MaxLease)
	case c.Limit == 0 && c.Lease != 0:
		return fmt.Errorf("%w: rule %q: an adaptive concurrency rule takes a lease only with a fleet limit", ErrInvalidRule, r.Name)
	}
	return nil
}

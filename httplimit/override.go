package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice"
)

// Override is one client's exception to the tiers. A client is a value of
// the request attribute named by Tiers.From: an API key, a user ID.
type Override struct {
	// Tier, if not empty, is the client's tier, whatever Tiers.Keys says
	// or the attribute names.
	Tier string
	// Limits are the client's own limits for the rules they name, in
	// place of its tier's. A limit for a Delay rule must be a bucket
	// limit (token_bucket or gcra) to apply.
	Limits map[string]sluice.Limit
}

// OverrideTier is the RuleEvent.Tier of a decision made under a client's
// own limit.
const OverrideTier = "override"

// ClientOverride is an Override made ready for the Limiters of one store.
// Build one with NewClientOverride; it is immutable and safe for
// concurrent use.
type ClientOverride struct {
	client string
	o      Override
	rules  map[string]*tierPolicy // by rule name
}

// Overrides finds clients' overrides for a Limiter (Options.Overrides).
type Overrides interface {
	// Override returns the override of client, the value of the request's
	// Tiers.From attribute, or nil if it has none. It is called once for
	// every request that matches a rule, so it must be fast, and safe for
	// concurrent use.
	Override(client string) *ClientOverride
}

// ClientPolicyName returns the name of the policy that holds a client's
// own limit for a rule: the rule's name, "@", and a digest of the client
// (16 characters). Rule names cannot hold "@", so a client's own limits
// never share counters with a rule's tiers, nor with another client's.
func ClientPolicyName(rule, client string) string {
	sum := sha256.Sum256([]byte(client))
	return rule + "@" + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// NewClientOverride validates o and prepares it for Limiters deciding on
// store. Errors wrap ErrInvalidRule or sluice.ErrInvalidLimit.
func NewClientOverride(store sluice.Store, client string, o Override) (*ClientOverride, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalidRule)
	}
	if o.Tier != "" && !validName(o.Tier) {
		return nil, fmt.Errorf("%w: tier name %q must be 1 to 64 characters from A-Z a-z 0-9 . _ -", ErrInvalidRule, o.Tier)
	}
	co := &ClientOverride{client: client, o: Override{Tier: o.Tier, Limits: make(map[string]sluice.Limit, len(o.Limits))},
		rules: make(map[string]*tierPolicy, len(o.Limits))}
	for _, rule := range sortedKeys(o.Limits) {
		if !validName(rule) {
			return nil, fmt.Errorf("%w: rule name %q must be 1 to 64 characters from A-Z a-z 0-9 . _ -", ErrInvalidRule, rule)
		}
		lim := o.Limits[rule]
		p, err := sluice.NewPolicy(ClientPolicyName(rule, client), lim)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", rule, err)
		}
		sl, err := sluice.NewWithPolicy(store, p)
		if err != nil {
			return nil, err
		}
		co.rules[rule] = &tierPolicy{policy: p, lim: sl, item: policyItem(rule, lim)}
		co.o.Limits[rule] = lim
	}
	return co, nil
}

// Client returns the client the override is for.
func (c *ClientOverride) Client() string { return c.client }

// Override returns a copy of the override.
func (c *ClientOverride) Override() Override {
	o := Override{Tier: c.o.Tier, Limits: make(map[string]sluice.Limit, len(c.o.Limits))}
	for k, v := range c.o.Limits {
		o.Limits[k] = v
	}
	return o
}

// policy returns the client's own policy for rule, or nil.
func (c *ClientOverride) policy(rule *compiled) *tierPolicy {
	if c == nil {
		return nil
	}
	tp := c.rules[rule.Name]
	if tp == nil || (rule.Action == Delay && !tp.policy.CanReserve()) {
		return nil
	}
	return tp
}

// clientState is what a request's tier lookup found, computed at most once
// per request.
type clientState struct {
	done bool
	tier string
	ov   *ClientOverride
}

// policyOf returns the policy of rule that applies to r, and its tier
// ("" for the rule's default limit): the client's own limit, else its
// tier's, else the default.
func (l *Limiter) policyOf(rule *compiled, r *http.Request, st *clientState) (*tierPolicy, string) {
	if len(rule.tiers) == 0 && l.overrides == nil {
		return rule.def, l.tiers.Default
	}
	if !st.done {
		st.done = true
		st.tier, st.ov = l.tierOf(r)
	}
	if tp := st.ov.policy(rule); tp != nil {
		return tp, OverrideTier
	}
	if t, ok := rule.tiers[st.tier]; ok {
		return t, st.tier
	}
	return rule.def, l.tiers.Default
}

// tierOf returns the request's tier name and its client's override, if any.
func (l *Limiter) tierOf(r *http.Request) (string, *ClientOverride) {
	if l.tiers.From == (KeyPart{}) {
		return l.tiers.Default, nil
	}
	var v string
	var ok bool
	if l.tiers.From.Source == SourceIP {
		if a, err := l.ip.Addr(r); err == nil {
			v, ok = a.String(), true
		}
	} else {
		v, ok = l.tiers.From.value(r)
	}
	if !ok {
		return l.tiers.Default, nil
	}
	var ov *ClientOverride
	if l.overrides != nil {
		if ov = l.overrides.Override(v); ov != nil && ov.o.Tier != "" {
			return ov.o.Tier, ov
		}
	}
	if l.tiers.Keys != nil {
		t, ok := l.tiers.Keys[v]
		if !ok {
			return l.tiers.Default, ov
		}
		return t, ov
	}
	return v, ov
}

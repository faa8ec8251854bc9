package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// Override is one client's exception to the tiers. A client is a value of
// the request attribute named by Tiers.Client, or Tiers.From: an API key,
// a user ID, a token's subject.
type Override struct {
	// Tier, if not empty, is the client's tier, whatever Tiers.Keys says
	// or the attribute names.
	Tier string
	// Limits are the client's own limits for the rules they name, in
	// place of its tier's. A limit for a Delay rule must be a bucket
	// limit (token_bucket or gcra) to apply.
	Limits map[string]sluice.Limit
	// Anchor, if not nil, is the client's billing anchor: the calendar
	// limits (sluice.Limit.Calendar) of every policy that decides its
	// requests, its tier's and its own, start their periods there (see
	// sluice.Policy.WithAnchor), keeping their counters.
	Anchor *calendar.Anchor
}

// OverrideTier is the RuleEvent.Tier of a decision made under a client's
// own limit.
const OverrideTier = "override"

// ClientOverride is an Override made ready for the Limiters of one store.
// Build one with NewClientOverride; it is immutable and safe for
// concurrent use.
type ClientOverride struct {
	client   string
	o        Override
	rules    map[string]*tierPolicy // by rule name
	store    sluice.Store
	anchored sync.Map // *tierPolicy → *tierPolicy with the client's anchor
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
	if o.Tier != "" {
		if err := CheckName("tier", o.Tier); err != nil {
			return nil, err
		}
	}
	co := &ClientOverride{client: client, o: Override{Tier: o.Tier, Limits: make(map[string]sluice.Limit, len(o.Limits)), Anchor: o.Anchor},
		rules: make(map[string]*tierPolicy, len(o.Limits)), store: store}
	for _, rule := range sortedKeys(o.Limits) {
		if err := CheckName("rule", rule); err != nil {
			return nil, err
		}
		lim := o.Limits[rule]
		p, err := sluice.NewPolicy(ClientPolicyName(rule, client), lim)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", rule, err)
		}
		if o.Anchor != nil {
			p = p.WithAnchor(*o.Anchor)
		}
		sl, err := sluice.NewWithPolicy(store, p)
		if err != nil {
			return nil, err
		}
		co.rules[rule] = &tierPolicy{policy: p, lim: sl, item: policyItem(rule, p)}
		co.o.Limits[rule] = lim
	}
	return co, nil
}

// Client returns the client the override is for.
func (c *ClientOverride) Client() string { return c.client }

// Override returns a copy of the override.
func (c *ClientOverride) Override() Override {
	o := Override{Tier: c.o.Tier, Limits: make(map[string]sluice.Limit, len(c.o.Limits)), Anchor: c.o.Anchor}
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

// withAnchor returns tp with the client's billing anchor applied to its
// calendar limits: tp itself when the override has none or tp has no
// calendar limit. The anchored policy keeps tp's name, and so its
// counters. It is built once per policy and kept with the override. A
// future source of anchors per request (a token claim) would apply
// sluice.Policy.WithAnchor the same way, with a cache of its own.
func (c *ClientOverride) withAnchor(tp *tierPolicy) *tierPolicy {
	if c == nil || c.o.Anchor == nil || tp == nil {
		return tp
	}
	if v, ok := c.anchored.Load(tp); ok {
		return v.(*tierPolicy)
	}
	out := tp
	if p := tp.policy.WithAnchor(*c.o.Anchor); p != tp.policy {
		if sl, err := sluice.NewWithPolicy(c.store, p); err == nil {
			out = &tierPolicy{policy: p, lim: sl, item: tp.item}
		}
	}
	v, _ := c.anchored.LoadOrStore(tp, out)
	return v.(*tierPolicy)
}

// claim returns a claim of the request's verified token and whether it has
// one that is not empty.
func (q *request) claim(name string) (string, bool) {
	if !q.verified {
		q.verified = true
		if q.l.identity != nil {
			q.claims = q.l.identity.Claims(q.r, q.clientAddr())
		}
	}
	v, ok := q.claims[name]
	return v, ok && v != ""
}

// policyOf returns the policy of rule that applies to r, and its tier
// ("" for the rule's default limit): the client's own limit, else its
// tier's, else the default.
func (l *Limiter) policyOf(rule *compiled, st *request) (*tierPolicy, string) {
	if len(rule.tiers) == 0 && l.overrides == nil {
		return l.requestAnchor(st, rule.def), l.tiers.Default
	}
	if !st.tierDone {
		st.tierDone = true
		st.tier, st.ov = l.tierOf(st)
	}
	if tp := st.ov.policy(rule); tp != nil {
		return tp, OverrideTier
	}
	tp, tier := rule.def, l.tiers.Default
	if t, ok := rule.tiers[st.tier]; ok {
		tp, tier = t, st.tier
	}
	if st.ov != nil && st.ov.o.Anchor != nil {
		return st.ov.withAnchor(tp), tier
	}
	return l.requestAnchor(st, tp), tier
}

// requestAnchor returns tp with the billing anchor that r names
// (Tiers.Anchor), or tp when r names none that parses or tp is no
// calendar quota.
func (l *Limiter) requestAnchor(st *request, tp *tierPolicy) *tierPolicy {
	if tp.anchors == nil || l.tiers.Anchor == (KeyPart{}) {
		return tp
	}
	if !st.anchorDone {
		st.anchorDone = true
		if v, ok := l.tiers.Anchor.value(st); ok {
			if a, err := calendar.ParseAnchor(v); err == nil {
				st.anchor, st.hasAnchor = a, true
			}
		}
	}
	if !st.hasAnchor {
		return tp
	}
	return tp.withAnchor(st.anchor)
}

// tierOf returns the request's tier name and its client's override, if any.
func (l *Limiter) tierOf(st *request) (string, *ClientOverride) {
	if l.tiers.From == (KeyPart{}) {
		return l.tiers.Default, nil
	}
	var ov *ClientOverride
	if l.tiers.Client != (KeyPart{}) && l.tiers.Client != l.tiers.From {
		if client, ok := l.tiers.Client.value(st); ok && l.overrides != nil {
			if ov = l.overrides.Override(client); ov != nil && ov.o.Tier != "" {
				return ov.o.Tier, ov
			}
		}
	}
	v, ok := l.tiers.From.value(st)
	if !ok {
		return l.tiers.Default, ov
	}
	if l.overrides != nil && (l.tiers.Client == (KeyPart{}) || l.tiers.Client == l.tiers.From) {
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

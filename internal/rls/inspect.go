package rls

import (
	"context"
	"errors"
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/storekit"
)

// ErrUnknownDomain reports a domain the rule tree does not have.
var ErrUnknownDomain = errors.New("rls: unknown domain")

// override returns the operator's override of one descriptor, if any and
// the tree knows its domain.
func (s *Service) override(rules Rules, domain string, es []descriptor.Entry) (descriptor.Match, bool) {
	if s.opts.Overrides == nil {
		return descriptor.Match{}, false
	}
	m, ok := s.opts.Overrides.Override(domain, es)
	if !ok || !rules.HasDomain(domain) {
		return descriptor.Match{}, false
	}
	return m, true
}

// KeyState is what the service applies to one descriptor, as the store
// sees it, uncharged.
type KeyState struct {
	// Match is the limit that applies: Match.Rule is nil when none does
	// (no rule, an allow-list entry), and Rule.Unlimited for an unlimited
	// one. Match.Key is the counter key under Rule.Policy.
	Match descriptor.Match
	// Override reports that the limits are an operator's override.
	Override bool
	// Decision is what Peek says of the counter (zero without a policy):
	// whether one more hit would pass, what remains of the binding limit
	// (Decision.Index), when it is full again. A key its rule's penalty
	// blocks is denied until the block ends.
	Decision sluice.Decision
	// Blocked is how long the rule's penalty still blocks the key; zero
	// when it does not (or the rule has no penalty).
	Blocked time.Duration
	// DeniedBy names the deny list that refuses every request carrying
	// the descriptor, and AllowList the allow list that exempts it from
	// its limit; empty when none does. Match is then zero.
	DeniedBy, AllowList string
}

// CheckDescriptor checks one descriptor against the service's bounds, as
// a request carrying it would be checked. Errors wrap ErrInvalidRequest,
// or ErrUnknownDomain when the tree has no such domain.
func (s *Service) CheckDescriptor(domain string, entries []descriptor.Entry) error {
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
	for _, e := range entries {
		req.Descriptors[0].Entries = append(req.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if _, err := s.validate(req); err != nil {
		return err
	}
	if !s.Rules().HasDomain(domain) {
		return fmt.Errorf("%w %q", ErrUnknownDomain, domain)
	}
	return nil
}

// Lookup returns the limit the service applies to one descriptor of a
// request for domain: its override, else the tree's, counting its calendar
// quotas from the billing anchor the entries carry (Options.Anchor). It
// checks the descriptor as CheckDescriptor does.
func (s *Service) Lookup(domain string, entries []descriptor.Entry) (descriptor.Match, bool, error) {
	if err := s.CheckDescriptor(domain, entries); err != nil {
		return descriptor.Match{}, false, err
	}
	rules := s.Rules()
	if m, ok := s.override(rules, domain, entries); ok {
		return m, true, nil
	}
	m := rules.Match(domain, entries)
	if a, ok := s.anchorOf(entries); ok && m.Rule != nil {
		m.Rule = m.Rule.WithAnchor(a)
	}
	return m, false, nil
}

// PeekDescriptor reports, without charging anything, the state of the
// counter one descriptor is charged to. Errors wrap ErrInvalidRequest,
// ErrUnknownDomain or ErrStore.
func (s *Service) PeekDescriptor(ctx context.Context, domain string, entries []descriptor.Entry) (KeyState, error) {
	if err := s.CheckDescriptor(domain, entries); err != nil {
		return KeyState{}, err
	}
	rules := s.Rules()
	if list, ok := rules.Denied(entries); ok {
		return KeyState{DeniedBy: list}, nil
	}
	if list, ok := rules.AllowListedBy(entries); ok {
		return KeyState{AllowList: list}, nil
	}
	m, ov, err := s.Lookup(domain, entries)
	if err != nil {
		return KeyState{}, err
	}
	ks := KeyState{Match: m, Override: ov}
	if m.Rule == nil || m.Rule.Policy == nil {
		return ks, nil
	}
	if ks.Decision, err = s.opts.Store.Peek(ctx, m.Rule.Policy, m.Key); err != nil {
		return KeyState{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if ks.Blocked, err = s.blocked(ctx, m.Rule.Policy, m.Key, ks.Decision); err != nil {
		return KeyState{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return ks, nil
}

// blocked tells how long p's penalty blocks key, given d, what Peek says
// of it under p: a penalized policy denies a blocked key longer than its
// limits alone would, which a policy of the same name and limits without
// the penalty (sharing their state) tells.
func (s *Service) blocked(ctx context.Context, p *sluice.Policy, key string, d sluice.Decision) (time.Duration, error) {
	if d.Allowed || storekit.Of(p).Penalty() == nil {
		return 0, nil
	}
	plain, err := sluice.NewPolicy(p.Name(), p.Limits()...)
	if err != nil {
		return 0, err
	}
	pd, err := s.opts.Store.Peek(ctx, plain, key)
	if err != nil {
		return 0, err
	}
	if pd.Allowed || pd.RetryAfter < d.RetryAfter {
		return d.RetryAfter, nil
	}
	return 0, nil
}

// ResetDescriptor forgets the counter one descriptor is charged to: its
// full quota is back. It returns what it reset, as PeekDescriptor would
// have found it before (Decision zero). Errors are PeekDescriptor's.
func (s *Service) ResetDescriptor(ctx context.Context, domain string, entries []descriptor.Entry) (KeyState, error) {
	m, ov, err := s.Lookup(domain, entries)
	if err != nil {
		return KeyState{}, err
	}
	ks := KeyState{Match: m, Override: ov}
	if m.Rule == nil || m.Rule.Policy == nil {
		return ks, nil
	}
	if err := s.opts.Store.Reset(ctx, m.Rule.Policy, m.Key); err != nil {
		return KeyState{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return ks, nil
}

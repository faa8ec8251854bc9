package rls

import (
	"context"
	"errors"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
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
	// (Decision.Index), when it is full again.
	Decision sluice.Decision
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
// request for domain: its override, else the tree's. It checks the
// descriptor as CheckDescriptor does.
func (s *Service) Lookup(domain string, entries []descriptor.Entry) (descriptor.Match, bool, error) {
	if err := s.CheckDescriptor(domain, entries); err != nil {
		return descriptor.Match{}, false, err
	}
	rules := s.Rules()
	if m, ok := s.override(rules, domain, entries); ok {
		return m, true, nil
	}
	return rules.Match(domain, entries), false, nil
}

// PeekDescriptor reports, without charging anything, the state of the
// counter one descriptor is charged to. Errors wrap ErrInvalidRequest,
// ErrUnknownDomain or ErrStore.
func (s *Service) PeekDescriptor(ctx context.Context, domain string, entries []descriptor.Entry) (KeyState, error) {
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
	return ks, nil
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

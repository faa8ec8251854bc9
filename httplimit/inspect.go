package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice"
)

// Errors of the inspection methods. Match them with errors.Is.
var (
	// ErrUnknownRule reports a rule name the Limiter does not have.
	ErrUnknownRule = errors.New("httplimit: no such rule")
	// ErrInvalidKey reports key values that do not fit a rule's key: the
	// wrong number of them, an IP part that is not an address, an empty
	// value.
	ErrInvalidKey = errors.New("httplimit: invalid key")
)

// KeyStatus is the state of one rule's limit for one key, as the store
// sees it, uncharged.
type KeyStatus struct {
	Rule string
	// Tier is the tier whose limit this is: "" for the rule's default
	// limit, OverrideTier for a client's own.
	Tier string
	// Key is the rule's composite key. It may identify a person.
	Key string
	// Limit is the limit's definition; zero for an Exempt or skipped rule.
	Limit sluice.Limit
	// Decision is what Peek says: whether one more request would pass,
	// how many remain, when the limit is full again.
	Decision sluice.Decision
	// Exempt is set for an Exempt rule that a request matched; Skipped
	// for a rule that would not apply (a key part missing under
	// MissingSkip).
	Exempt, Skipped bool
	// Shadow is set when the rule counts the key but never blocks it: a
	// Shadow rule, or a key that the rule's Enforce leaves in shadow
	// mode.
	Shadow bool
	// Concurrency is set for the slots of a concurrency rule (a rule with
	// a rate too has a KeyStatus for each): Limit is then zero, and the
	// Decision says whether a slot is free (Allowed), how many
	// (Remaining), when the earliest lease expires by itself if none is
	// (RetryAfter) and when the last one held does (ResetAfter).
	Concurrency *ConcurrencyRule
}

// slots returns the status of key's slots under a concurrency rule c.
func (c *compiled) slots(ctx context.Context, key string) (KeyStatus, error) {
	d, err := c.conc.Peek(ctx, key)
	if err != nil {
		return KeyStatus{}, err
	}
	cr := *c.Concurrency
	return KeyStatus{Rule: c.Name, Key: key, Decision: d, Concurrency: &cr}, nil
}

// Rule returns the rule with the given name, as the Limiter holds it.
func (l *Limiter) Rule(name string) (Rule, bool) {
	c := l.rule(name)
	if c == nil {
		return Rule{}, false
	}
	return c.Rule, true
}

// Rules returns the names of the Limiter's rules, in order.
func (l *Limiter) Rules() []string {
	names := make([]string, len(l.rules))
	for i := range l.rules {
		names[i] = l.rules[i].Name
	}
	return names
}

// TierNames returns every tier some rule has a limit for, and the default
// tier, sorted.
func (l *Limiter) TierNames() []string {
	seen := map[string]bool{l.tiers.Default: true}
	for i := range l.rules {
		for t := range l.rules[i].Tiers {
			seen[t] = true
		}
	}
	return sortedKeys(seen)
}

// TierSource returns Tiers.From: the request attribute that names a
// request's tier; the zero KeyPart when tiers come from nowhere (and
// Overrides are never asked).
func (l *Limiter) TierSource() KeyPart { return l.tiers.From }

// ClientSource returns the request attribute that identifies a client for
// Overrides: Tiers.Client, or Tiers.From without one.
func (l *Limiter) ClientSource() KeyPart {
	if l.tiers.Client != (KeyPart{}) {
		return l.tiers.Client
	}
	return l.tiers.From
}

func (l *Limiter) rule(name string) *compiled {
	for i := range l.rules {
		if l.rules[i].Name == name {
			return &l.rules[i]
		}
	}
	return nil
}

// RuleKey returns a rule's composite key for the values of its key parts,
// in order, one for each part except global ones (which take none): for an
// ip part, the client's address (masked as ClientIP masks it, so any
// address of one IPv6 /64 gives the same key); for the other parts, the
// value a request would carry (a host lower-cased, without its port). It is
// the key the rule charges a request with these values.
func (l *Limiter) RuleKey(rule string, values []string) (string, error) {
	c := l.rule(rule)
	if c == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	if c.Action == Exempt {
		return "", fmt.Errorf("%w: rule %q is exempt and has no key", ErrInvalidKey, rule)
	}
	want := 0
	for _, k := range c.Key {
		if !k.source().noValue {
			want++
		}
	}
	if len(values) != want {
		return "", fmt.Errorf("%w: rule %q is keyed by %s: want %d values, got %d", ErrInvalidKey, rule, keyString(c.Key), want, len(values))
	}
	var b []byte
	i := 0
	for _, k := range c.Key {
		var v string
		if !k.source().noValue {
			v = values[i]
			i++
		}
		var err error
		if b, err = k.appendGiven(l, b, v); err != nil {
			return "", fmt.Errorf("rule %q: %w", rule, err)
		}
	}
	return string(b), nil
}

func keyString(ks []KeyPart) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += ", "
		}
		s += k.String()
	}
	return s + "]"
}

// policies returns every policy of rule that a key can be charged under:
// the default, each tier's (sorted by tier name), and the client's own;
// with the client's billing anchor, if its override has one.
func (c *compiled) policies(ov *ClientOverride) (tps []*tierPolicy, tiers []string) {
	if c.def != nil {
		tps, tiers = append(tps, ov.withAnchor(c.def)), append(tiers, "")
	}
	for _, t := range sortedKeys(c.tiers) {
		if tp := ov.withAnchor(c.tiers[t]); !slices.Contains(tps, tp) {
			tps, tiers = append(tps, tp), append(tiers, t)
		}
	}
	if tp := ov.policy(c); tp != nil {
		tps, tiers = append(tps, tp), append(tiers, OverrideTier)
	}
	return tps, tiers
}

// PeekKey reports, without charging anything, the state of key (from
// RuleKey) under every limit of rule it can be charged under: the rule's
// default limit, each tier's, and ov's own limit for the rule if ov is not
// nil.
func (l *Limiter) PeekKey(ctx context.Context, rule, key string, ov *ClientOverride) ([]KeyStatus, error) {
	c := l.rule(rule)
	if c == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	tps, tiers := c.policies(ov)
	out := make([]KeyStatus, 0, len(tps))
	for i, tp := range tps {
		d, err := tp.lim.Peek(ctx, key)
		if err != nil {
			return nil, err
		}
		out = append(out, KeyStatus{Rule: rule, Tier: tiers[i], Key: key, Limit: tp.policy.Limits()[0], Decision: d,
			Shadow: c.Action == Shadow || !c.Enforce.Enforces(c.Name, key)})
	}
	if c.conc != nil {
		ks, err := c.slots(ctx, key)
		if err != nil {
			return nil, err
		}
		out = append(out, ks)
	}
	return out, nil
}

// ResetKey forgets key (from RuleKey) under every limit of rule it can be
// charged under (see PeekKey): its full quota is back. For a concurrency
// rule it drops the key's leases: every slot is free at once.
func (l *Limiter) ResetKey(ctx context.Context, rule, key string, ov *ClientOverride) error {
	c := l.rule(rule)
	if c == nil {
		return fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	tps, _ := c.policies(ov)
	for _, tp := range tps {
		if err := tp.lim.Reset(ctx, key); err != nil {
			return err
		}
	}
	if c.conc != nil {
		return c.conc.Reset(ctx, key)
	}
	return nil
}

// PeekRequest reports, without charging anything, what the rules say about
// r: every rule that matches it, in order, up to and including an Exempt
// one, with the key and the limit (tier, or the client's own) r would be
// charged under, and its state.
func (l *Limiter) PeekRequest(ctx context.Context, r *http.Request) ([]KeyStatus, error) {
	c := new(call)
	q := l.newRequest(r)
	l.match(c, &q)
	out := make([]KeyStatus, 0, len(c.events))
	for i, e := range c.events {
		ks := KeyStatus{Rule: e.Rule, Tier: e.Tier, Key: e.Key, Exempt: e.Action == Exempt, Skipped: e.Outcome == OutcomeSkipped || e.Outcome == OutcomeAllowListed,
			Shadow: e.Action == Shadow && c.policies[i] != nil}
		if tp := c.policies[i]; tp != nil {
			d, err := tp.lim.Peek(ctx, e.Key)
			if err != nil {
				return nil, err
			}
			ks.Limit, ks.Decision = tp.policy.Limits()[0], d
		}
		if rule := c.rules[i]; rule.conc != nil && !ks.Skipped {
			if tp := c.policies[i]; tp != nil {
				out = append(out, ks)
			}
			sl, err := rule.slots(ctx, e.Key)
			if err != nil {
				return nil, err
			}
			ks = sl
		}
		out = append(out, ks)
	}
	return out, nil
}

// matchPath returns r's path as rules see it, as serve computes it.
func (l *Limiter) matchPath(r *http.Request) string {
	p := cleanPath(r.URL.Path)
	if !l.caseSensitive {
		p = lowerPath(p)
	}
	return p
}

// ResetRequest forgets, for every rule that matches r (or only the one
// named rule, if rule is not empty), the key r would be charged under, in
// the limit it would be charged under and in the rule's default and tier
// limits, and returns the names of the rules reset.
func (l *Limiter) ResetRequest(ctx context.Context, r *http.Request, rule string) ([]string, error) {
	c := new(call)
	q := l.newRequest(r)
	l.match(c, &q)
	var rules []string
	for i, e := range c.events {
		tp, conc := c.policies[i], c.rules[i].conc
		if (tp == nil && (conc == nil || e.Outcome == OutcomeSkipped || e.Outcome == OutcomeAllowListed)) || (rule != "" && e.Rule != rule) {
			continue
		}
		tps, _ := c.rules[i].policies(nil)
		if tp != nil && !slices.Contains(tps, tp) {
			tps = append(tps, tp)
		}
		for _, tp := range tps {
			if err := tp.lim.Reset(ctx, e.Key); err != nil {
				return rules, err
			}
		}
		if conc != nil {
			if err := conc.Reset(ctx, e.Key); err != nil {
				return rules, err
			}
		}
		rules = append(rules, e.Rule)
	}
	return rules, nil
}

// KeyText returns a rule's composite key (RuleEvent.Key) as the values an
// operator gives for it to RuleKey and `sluice key show`: one per key
// part, separated by spaces, each quoted (Go syntax) when it is empty or
// holds a space, a quote or a character that does not print. A value
// replaced by its digest (longer than MaxValueLen) is shown as # and the
// digest; a missing part keyed by the client's address as missing: and
// the address. A key that is not a composite key of this package is
// returned quoted.
func KeyText(key string) string {
	parts, ok := splitKey(key)
	if !ok {
		return strconv.Quote(key)
	}
	var out []string
	for _, p := range parts {
		if p.tag == 'g' && !p.missing {
			continue // global: no value
		}
		out = append(out, p.text())
	}
	return strings.Join(out, " ")
}

// KeyString returns key, a composite key of the rule named rule (such as
// RuleEvent.Key), with the names of the rule's key parts: "part=value" for
// each, space separated, in the rule's order, the values as KeyText shows
// them ("ip=192.0.2.1/32 header:X-Api-Key=k-123"), and a part that takes
// no value by its name alone ("global"). It returns ErrUnknownRule for a
// rule the Limiter does not have and ErrInvalidKey for a key the rule
// cannot have made.
func (l *Limiter) KeyString(rule, key string) (string, error) {
	c := l.rule(rule)
	if c == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	parts, ok := splitKey(key)
	if !ok || len(parts) != len(c.Key) {
		return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
	}
	var b strings.Builder
	for i, k := range c.Key {
		p, ks := parts[i], k.source()
		switch {
		case p.missing:
		case k.Source == SourceIP && p.tag == 'u':
		case k.Source == SourceIP && p.tag == 'i':
			if _, err := netip.ParsePrefix(p.value); err != nil {
				return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
			}
		case p.tag != ks.tag:
			return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k.String())
		if ks.noValue && !p.missing {
			continue
		}
		b.WriteByte('=')
		b.WriteString(p.text())
	}
	return b.String(), nil
}

// keyPart is one part of a composite key, as splitKey finds it.
type keyPart struct {
	tag byte // its source's tag: 'i' for an address, 'u' for a request without one
	// missing marks a part the request lacked, keyed by the client's
	// address in its place.
	missing bool
	// value is the part's value: an address as a prefix
	// ("203.0.113.7/32"), a digest as "#" and the digest, or the value.
	value string
}

// text returns the part's value as KeyText shows it.
func (p keyPart) text() string {
	v := p.value
	if p.missing {
		v = "missing:" + v
	}
	if v == "" || strings.ContainsAny(v, " \"'\\") || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		v = strconv.Quote(v)
	}
	return v
}

// splitKey splits a composite key, as the key sources append them, into
// its parts; ok is false for a string that is not such a key.
func splitKey(key string) (parts []keyPart, ok bool) {
	for rest := key; rest != ""; {
		p := keyPart{tag: rest[0]}
		rest = rest[1:]
		if p.tag == 'm' && rest != "" && (rest[0] == 'i' || rest[0] == 'u') {
			// A missing part, keyed by the address after it (a method
			// has a length after its tag).
			p.missing, p.tag, rest = true, rest[0], rest[1:]
		}
		switch {
		case p.tag == 'i':
			slash := strings.IndexByte(rest, '/')
			if slash < 0 {
				return nil, false
			}
			end := slash + 1
			for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
				end++
			}
			p.value, rest = rest[:end], rest[end:]
		case strings.HasPrefix(rest, "#") && len(rest) >= 25:
			p.value, rest = rest[:25], rest[25:]
		default:
			colon := strings.IndexByte(rest, ':')
			n, err := strconv.Atoi(rest[:max(colon, 0)])
			if colon < 0 || err != nil || n < 0 || n > len(rest)-colon-1 {
				return nil, false
			}
			p.value, rest = rest[colon+1:colon+1+n], rest[colon+1+n:]
		}
		parts = append(parts, p)
	}
	return parts, true
}

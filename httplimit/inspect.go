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

// KeyString returns key, a composite key of the rule named rule (such as
// RuleEvent.Key), in a readable form: each key part as "part=value", space
// separated, in the rule's order, such as "ip=192.0.2.1/32
// header:X-Api-Key=k-123". An ip part shows the address as keys hold it,
// masked; a value longer than MaxValueLen shows the digest the key holds
// ("sha256:…"); a value with spaces, quotes or unprintable bytes is quoted
// as Go quotes strings; a part the request lacked, which the rule replaced
// by the client's address, shows "(missing)" and that address. It returns
// ErrUnknownRule for a rule the Limiter does not have and ErrInvalidKey
// for a key the rule cannot have made.
func (l *Limiter) KeyString(rule, key string) (string, error) {
	c := l.rule(rule)
	if c == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	var b strings.Builder
	rest := key
	for i, k := range c.Key {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k.String())
		b.WriteByte('=')
		ks := k.source()
		if len(rest) >= 2 && rest[0] == 'm' && (rest[1] == 'i' || rest[1] == 'u') {
			// Missing, keyed by the client's address ('m' then the ip
			// part's form). A method's own form ("m3:GET") never has
			// 'i' or 'u' after its tag.
			addr, after, ok := cutAddrForm(rest[1:])
			if !ok {
				return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
			}
			b.WriteString("(missing) ip=")
			b.WriteString(addr)
			rest = after
			continue
		}
		if k.Source == SourceIP {
			addr, after, ok := cutAddrForm(rest)
			if !ok {
				return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
			}
			b.WriteString(addr)
			rest = after
			continue
		}
		v, after, ok := cutValue(rest, ks.tag)
		if !ok {
			return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
		}
		if !ks.noValue {
			b.WriteString(readable(v))
		}
		rest = after
	}
	if rest != "" {
		return "", fmt.Errorf("%w: rule %q: %q is not a key of %s", ErrInvalidKey, rule, key, keyString(c.Key))
	}
	return b.String(), nil
}

// cutAddrForm cuts the ip part's form from the front of s: 'i' and a
// prefix ("i192.0.2.1/32"), or 'u' and a value (a request without a usable
// address). It returns the address as text and the rest.
func cutAddrForm(s string) (addr, rest string, ok bool) {
	switch {
	case s == "":
		return "", "", false
	case s[0] == 'u':
		v, rest, ok := cutValue(s, 'u')
		return "(no address) " + readable(v), rest, ok
	case s[0] != 'i':
		return "", "", false
	}
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return "", "", false
	}
	end := slash + 1
	for end < len(s) && end-slash <= 3 && '0' <= s[end] && s[end] <= '9' {
		end++
	}
	p, err := netip.ParsePrefix(s[1:end])
	if err != nil {
		return "", "", false
	}
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String(), s[end:], true
	}
	return p.String(), s[end:], true
}

// cutValue cuts appendValue's form of a value with the given tag from the
// front of s: the tag, the length, ':' and the value; or the tag, '#' and
// the value's digest, returned as "sha256:DIGEST".
func cutValue(s string, tag byte) (v, rest string, ok bool) {
	if len(s) < 2 || s[0] != tag {
		return "", "", false
	}
	if s[1] == '#' {
		const n = 24 // 18 bytes of digest in unpadded base64
		if len(s) < 2+n {
			return "", "", false
		}
		return "sha256:" + s[2:2+n], s[2+n:], true
	}
	colon := strings.IndexByte(s, ':')
	if colon < 2 || colon > 5 {
		return "", "", false
	}
	n, err := strconv.Atoi(s[1:colon])
	if err != nil || n < 0 || n > MaxValueLen || len(s)-colon-1 < n {
		return "", "", false
	}
	return s[colon+1 : colon+1+n], s[colon+1+n:], true
}

// readable returns v as it is when it is printable and has no space or
// quote, and quoted otherwise.
func readable(v string) string {
	for _, r := range v {
		if r == ' ' || r == '"' || r == '\\' || !strconv.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	if v == "" {
		return `""`
	}
	return v
}

package descriptor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// Set is the built rule trees of several domains. It is immutable and safe
// for concurrent use; its zero value holds no domain.
type Set struct {
	domains map[string]*node
	lists   lists // by entry key; see WithLists

	overrides    sync.Map // overrideKey → *Rule
	overrideSize sync.Mutex
	overrideN    int
}

// node is one level of a built tree: its rule, and its children grouped by
// key.
type node struct {
	rule     *Rule
	children map[string]*group
}

// group is the children of a node that share one key.
type group struct {
	exact map[string]*node
	wild  []wildcard // in configuration order
	def   *node      // the key-only default entry
}

type wildcard struct {
	parts  []string // the pattern split at each "*"
	shared bool     // ShareThreshold: one counter for every value
	node   *node
}

// match reports whether v matches the pattern "parts[0]*parts[1]*...".
func (w *wildcard) match(v string) bool {
	p := w.parts
	if !strings.HasPrefix(v, p[0]) {
		return false
	}
	v = v[len(p[0]):]
	last := p[len(p)-1]
	for _, part := range p[1 : len(p)-1] {
		i := strings.Index(v, part)
		if i < 0 {
			return false
		}
		v = v[i+len(part):]
	}
	return len(v) >= len(last) && strings.HasSuffix(v, last)
}

// MaxDepth is the deepest a tree may nest descriptors.
const MaxDepth = 64

// New builds a Set from domains, creating each limit's policy. It reports
// every problem at once, in an error wrapping ErrInvalid: an empty or
// repeated domain, an empty key, two entries of one level with the same
// composite key (key, or key_value, as envoyproxy/ratelimit names them), an
// invalid unit, a unit or limits on an unlimited rate limit, an empty name in
// Replaces or a rate limit that replaces its own name, ShareThreshold on an
// entry that is not a wildcard, invalid Sluice limits, an invalid penalty
// or one on an unlimited or deny-all rate limit, and trees deeper than
// MaxDepth.
func New(domains ...Domain) (*Set, error) {
	s := &Set{domains: make(map[string]*node, len(domains))}
	var errs []error
	for _, d := range domains {
		if d.Name == "" {
			errs = append(errs, fmt.Errorf("%w: a domain has no name", ErrInvalid))
			continue
		}
		if _, dup := s.domains[d.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: duplicate domain %q", ErrInvalid, d.Name))
			continue
		}
		root := &node{}
		b := builder{domain: d.Name, errs: &errs}
		b.level(root, d.Descriptors, nil, nil)
		s.domains[d.Name] = root
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Domains returns the names of the Set's domains, in no particular order.
func (s *Set) Domains() []string {
	out := make([]string, 0, len(s.domains))
	for d := range s.domains {
		out = append(out, d)
	}
	return out
}

// HasDomain reports whether the Set holds the domain.
func (s *Set) HasDomain(domain string) bool {
	_, ok := s.domains[domain]
	return ok
}

type builder struct {
	domain string
	errs   *[]error
}

func (b *builder) fail(path []string, format string, args ...any) {
	where := strings.Join(append([]string{b.domain}, path...), ".")
	*b.errs = append(*b.errs, fmt.Errorf("%w: %s: %s", ErrInvalid, where, fmt.Sprintf(format, args...)))
}

// level builds the children of n from ds; segments and variable describe
// the path to n.
func (b *builder) level(n *node, ds []Descriptor, segments []string, variable []bool) {
	if len(segments) >= MaxDepth && len(ds) > 0 {
		b.fail(segments, "descriptors nested more than %d levels deep", MaxDepth)
		return
	}
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Key == "" {
			b.fail(segments, "descriptor has an empty key")
			continue
		}
		seg := d.Key
		if d.Value != "" {
			seg += "_" + d.Value
		}
		path := append(segments[:len(segments):len(segments)], seg)
		if seen[seg] {
			b.fail(path, "duplicate descriptor composite key %q", seg)
			continue
		}
		seen[seg] = true
		isWild := strings.Contains(d.Value, "*")
		if d.ShareThreshold && !isWild {
			b.fail(path, "share_threshold is only for wildcard values (a value with *)")
		}
		vars := append(variable[:len(variable):len(variable)], d.Value == "" || isWild && !d.ShareThreshold)
		child := &node{}
		if d.RateLimit != nil {
			child.rule = b.rule(d, path, vars)
		} else if d.Enforce != nil {
			b.fail(path, "enforce needs a rate_limit")
		}
		if n.children == nil {
			n.children = map[string]*group{}
		}
		g := n.children[d.Key]
		if g == nil {
			g = &group{}
			n.children[d.Key] = g
		}
		switch {
		case d.Value == "":
			g.def = child
		case isWild:
			g.wild = append(g.wild, wildcard{parts: strings.Split(d.Value, "*"), shared: d.ShareThreshold, node: child})
		default:
			if g.exact == nil {
				g.exact = map[string]*node{}
			}
			g.exact[d.Value] = child
		}
		b.level(child, d.Descriptors, path, vars)
	}
}

func (b *builder) rule(d Descriptor, path []string, vars []bool) *Rule {
	rl := d.RateLimit
	r := &Rule{
		Domain:         b.domain,
		Name:           rl.Name,
		Replaces:       append([]string(nil), rl.Replaces...),
		Unlimited:      rl.Unlimited,
		ShadowMode:     d.ShadowMode,
		QuotaMode:      d.QuotaMode,
		DetailedMetric: d.DetailedMetric,
		ValueToMetric:  d.ValueToMetric,
		Enforce:        cloneRollout(d.Enforce),
		MetricKey:      b.domain + "." + strings.Join(path, "."),
		segments:       path,
		variable:       vars,
	}
	for _, name := range rl.Replaces {
		switch {
		case name == "":
			b.fail(path, "should not have an empty replaces entry")
		case name == rl.Name:
			b.fail(path, "replaces should not contain the name of the same descriptor (%q)", name)
		}
	}
	if d.Enforce != nil {
		b.checkEnforce(d, path, vars)
	}
	if rl.Unlimited {
		if rl.Unit != UnitUnknown {
			b.fail(path, "should not specify rate limit unit when unlimited")
		}
		if len(rl.Limits) > 0 {
			b.fail(path, "should not specify limits when unlimited")
		}
		if rl.Penalty != nil {
			b.fail(path, "should not specify a penalty when unlimited")
		}
		return r
	}
	limits := rl.Limits
	if len(limits) == 0 {
		if !rl.Unit.Valid() {
			b.fail(path, "invalid rate limit unit %q", rl.Unit)
			return r
		}
		if rl.RequestsPerUnit == 0 {
			if rl.Penalty != nil {
				b.fail(path, "a penalty needs a limit to count denials against, and zero requests per unit denies every request")
			}
			r.DenyAll = true
			r.Displays = []Display{{Count: 0, Period: rl.Unit.Duration(), Unit: rl.Unit, UnitMultiplier: 1}}
			return r
		}
		limits = []sluice.Limit{{Algorithm: sluice.FixedWindow, Count: int64(rl.RequestsPerUnit), Period: rl.Unit.Duration()}}
	}
	p, err := sluice.NewPolicy(PolicyName(b.domain, path), limits...)
	if err == nil && rl.Penalty != nil {
		p, err = p.WithPenalty(*rl.Penalty)
	}
	if err != nil {
		b.fail(path, "%v", err)
		return r
	}
	if rl.Sync != (sluice.Sync{}) {
		if p, err = p.WithSync(rl.Sync); err != nil {
			b.fail(path, "%v", err)
			return r
		}
	}
	r.Policy = p
	for _, l := range limits {
		r.Displays = append(r.Displays, displayOf(l))
		if l.Calendar != nil {
			r.anchors = &anchorCache{}
		}
	}
	return r
}

// PolicyName returns the name of the policy of the node at path (each
// level's key or key_value) in domain: the domain and the levels joined by
// "/", with "%", "/" and control characters escaped as %XX so that distinct
// paths get distinct names. A name longer than 200 bytes keeps its first 150
// and ends in "#" and a digest of the whole path. The name depends only on
// the path, so a reloaded configuration keeps its counters.
func PolicyName(domain string, path []string) string {
	var sb strings.Builder
	escapeTo(&sb, domain)
	for _, p := range path {
		sb.WriteByte('/')
		escapeTo(&sb, p)
	}
	name := sb.String()
	if len(name) <= 200 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	cut := 150
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "#" + hex.EncodeToString(sum[:16])
}

func escapeTo(sb *strings.Builder, s string) {
	const hexdig = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || c < 0x20 || c == 0x7f {
			sb.WriteByte('%')
			sb.WriteByte(hexdig[c>>4])
			sb.WriteByte(hexdig[c&15])
			continue
		}
		sb.WriteByte(c)
	}
}

// Match is the outcome of matching one descriptor.
type Match struct {
	// Rule is the limit that applies; nil when none does: an unknown
	// domain, a descriptor that matches no path to a limit, an allow-list
	// entry, or a limit replaced by another (ApplyReplaces).
	Rule *Rule
	// Key is the counter key for Rule.Policy: empty when the node's path
	// matched only exact values and shared wildcards, the value itself
	// when one level matched through a default or wildcard entry, and the
	// values in an unambiguous length-prefixed form when several did.
	Key string
	// Replaced is set by ApplyReplaces on a match whose rule another rule
	// of the same request replaced; Rule is then nil.
	Replaced bool

	entries []Entry
}

// Match returns the limit that applies to one descriptor of a request for
// domain, following the rules of the package documentation. It allocates
// only when two or more levels of the path are counted per value, once.
func (s *Set) Match(domain string, entries []Entry) Match {
	n, nvar, one := s.walk(domain, entries)
	if n == nil || n.rule == nil {
		return Match{}
	}
	m := Match{Rule: n.rule, entries: entries}
	switch nvar {
	case 0:
	case 1:
		m.Key = one
	default:
		m.Key = counterKey(entries, n.rule.variable)
	}
	return m
}

// AllowListed reports whether the descriptor reaches a node of the tree
// that has no rate limit (an allow-list entry, or a node that only holds
// nested descriptors): Match finds no rule for it, and not because no
// node matches.
func (s *Set) AllowListed(domain string, entries []Entry) bool {
	n, _, _ := s.walk(domain, entries)
	return n != nil && n.rule == nil
}

// walk follows entries down the domain's tree and returns the node
// reached, or nil, with the number of levels counted per value and the
// last such value.
func (s *Set) walk(domain string, entries []Entry) (*node, int, string) {
	n := s.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil, 0, ""
	}
	nvar := 0
	var one string
	for _, e := range entries {
		g := n.children[e.Key]
		if g == nil {
			return nil, 0, ""
		}
		next, variable := g.exact[e.Value], false
		if next == nil {
			for i := range g.wild {
				if g.wild[i].match(e.Value) {
					next, variable = g.wild[i].node, !g.wild[i].shared
					break
				}
			}
		}
		if next == nil && g.def != nil {
			next, variable = g.def, true
		}
		if next == nil {
			return nil, 0, ""
		}
		if variable {
			nvar++
			one = e.Value
		}
		n = next
	}
	return n, nvar, one
}

// counterKey writes the values of the variable levels, each but the last
// preceded by its length and a colon: the lengths make the key injective.
func counterKey(entries []Entry, variable []bool) string {
	size, last := 0, -1
	for i, e := range entries {
		if variable[i] {
			size += len(e.Value) + 12
			last = i
		}
	}
	var sb strings.Builder
	sb.Grow(size)
	var num [20]byte
	for i, e := range entries {
		if !variable[i] {
			continue
		}
		if i != last {
			sb.Write(strconv.AppendInt(num[:0], int64(len(e.Value)), 10))
			sb.WriteByte(':')
		}
		sb.WriteString(e.Value)
	}
	return sb.String()
}

// MetricName returns the name under which the match is measured: the rule's
// MetricKey, except that with DetailedMetric the last level, and with
// ValueToMetric every level, that matched through a default or wildcard
// entry shows the request's key_value instead of the configured entry; for
// a request's own limit (Override) it is the domain and the request's
// entries. Empty when no rule applies.
func (m Match) MetricName() string {
	r := m.Rule
	if r == nil {
		return ""
	}
	if r.override {
		return r.Domain + "." + entriesName(m.entries)
	}
	if !r.DetailedMetric && !r.ValueToMetric {
		return r.MetricKey
	}
	var sb strings.Builder
	sb.WriteString(r.Domain)
	for i, seg := range r.segments {
		sb.WriteByte('.')
		dynamic := r.variable[i] || strings.Contains(seg, "*") // a default or wildcard entry
		if dynamic && (r.ValueToMetric || i == len(r.segments)-1) {
			e := m.entries[i]
			sb.WriteString(e.Key)
			if e.Value != "" {
				sb.WriteByte('_')
				sb.WriteString(e.Value)
			}
			continue
		}
		sb.WriteString(seg)
	}
	return sb.String()
}

func entriesName(entries []Entry) string {
	var sb strings.Builder
	for i, e := range entries {
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(e.Key)
		if e.Value != "" {
			sb.WriteByte('_')
			sb.WriteString(e.Value)
		}
	}
	return sb.String()
}

// ApplyReplaces applies the replaces of the rules that matched the
// descriptors of one request, as envoyproxy/ratelimit does: every name
// listed in the Replaces of any matched rule (unlimited ones included)
// removes each other matched rule of that name, which then neither limits
// the request nor is charged. Unlimited rules stay as they are. It does not
// allocate.
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

type overrideKey struct {
	domain string
	rpu    uint32
	unit   Unit
}

// maxOverrides bounds the rules one Set's Override keeps; beyond it, rules
// of admitted definitions are built for each call, which allocates but
// keeps nothing.
const maxOverrides = 4096

// MaxOverrideDefinitions bounds the distinct limits (requests per unit and
// unit) that descriptors' own limits may use in one process, over every
// Set. Each distinct limit adds a definition to sluice's process-wide
// registry, which never shrinks (in-process stores carry state between
// definitions by it); the bound keeps a caller who can choose its own
// limits from growing it without end.
const MaxOverrideDefinitions = 4096

// ErrTooManyOverrides is wrapped by the error Override returns for a
// descriptor's own limit that would be the process's
// MaxOverrideDefinitions+1st distinct one.
var ErrTooManyOverrides = errors.New("descriptor: too many distinct limits in descriptors' own limits")

// overrideDefs holds the distinct limits of descriptors' own limits
// admitted in the process.
var overrideDefs struct {
	sync.Mutex
	m map[overrideKey]struct{}
}

// admitOverride reports whether the limit rpu per unit may be built: it was
// admitted before, or fewer than MaxOverrideDefinitions were.
func admitOverride(rpu uint32, unit Unit) bool {
	k := overrideKey{rpu: rpu, unit: unit}
	overrideDefs.Lock()
	defer overrideDefs.Unlock()
	if _, ok := overrideDefs.m[k]; ok {
		return true
	}
	if len(overrideDefs.m) >= MaxOverrideDefinitions {
		return false
	}
	if overrideDefs.m == nil {
		overrideDefs.m = map[overrideKey]struct{}{}
	}
	overrideDefs.m[k] = struct{}{}
	return true
}

// Override returns the match for a descriptor that carries its own limit
// (the limit field of an Envoy RateLimitDescriptor): requestsPerUnit per
// unit, a fixed window, counted per distinct list of entries, never in
// shadow mode, whatever the domain's tree says, as envoyproxy/ratelimit
// does. An unknown domain matches nothing, as there. Its policy is named
// "<domain>//override", a name no node of a tree can have. Zero requests per unit
// deny every request. An invalid unit is an error; so is a limit that would
// be the process's MaxOverrideDefinitions+1st distinct one (an error
// wrapping ErrTooManyOverrides), while the limits admitted before keep
// working: memory stays bounded whatever limits callers send.
func (s *Set) Override(domain string, entries []Entry, requestsPerUnit uint32, unit Unit) (Match, error) {
	if !s.HasDomain(domain) {
		return Match{}, nil
	}
	if !unit.Valid() {
		return Match{}, fmt.Errorf("descriptor: invalid unit %d in a descriptor's limit", int32(unit))
	}
	k := overrideKey{domain, requestsPerUnit, unit}
	var r *Rule
	if v, ok := s.overrides.Load(k); ok {
		r = v.(*Rule)
	} else {
		r = &Rule{Domain: domain, override: true}
		if requestsPerUnit == 0 {
			r.DenyAll = true
			r.Displays = []Display{{Period: unit.Duration(), Unit: unit, UnitMultiplier: 1}}
		} else {
			if !admitOverride(requestsPerUnit, unit) {
				return Match{}, fmt.Errorf("%w: %d per %s would be one more than the %d this process admits", ErrTooManyOverrides, requestsPerUnit, unit, MaxOverrideDefinitions)
			}
			p, err := sluice.NewPolicy(PolicyName(domain, []string{"", "override"}),
				sluice.Limit{Algorithm: sluice.FixedWindow, Count: int64(requestsPerUnit), Period: unit.Duration()})
			if err != nil {
				return Match{}, fmt.Errorf("descriptor: a descriptor's limit: %w", err)
			}
			r.Policy = p
			r.Displays = []Display{display(int64(requestsPerUnit), unit.Duration())}
		}
		s.overrideSize.Lock()
		if s.overrideN < maxOverrides {
			if v, loaded := s.overrides.LoadOrStore(k, r); loaded {
				r = v.(*Rule)
			} else {
				s.overrideN++
			}
		}
		s.overrideSize.Unlock()
	}
	return Match{Rule: r, Key: overrideCounterKey(entries), entries: entries}, nil
}

// overrideCounterKey is the counter key of a request's own limit and of
// KeyOverride: the entries' part of AppendKey.
func overrideCounterKey(entries []Entry) string {
	return string(appendEntries(nil, entries))
}

// AppendKey appends to dst a key that names one descriptor of a domain:
// the domain, then each entry's key and value, every one preceded by its
// length in decimal and a colon, so that distinct descriptors get distinct
// keys. It allocates only when dst has too little room: a map keyed by
// descriptors is looked up without an allocation as
// m[string(AppendKey(buf[:0], domain, entries))], with buf an array on the
// stack.
func AppendKey(dst []byte, domain string, entries []Entry) []byte {
	return appendEntries(appendLenPrefixed(dst, domain), entries)
}

func appendEntries(dst []byte, entries []Entry) []byte {
	for _, e := range entries {
		dst = appendLenPrefixed(appendLenPrefixed(dst, e.Key), e.Value)
	}
	return dst
}

func appendLenPrefixed(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// KeyOverride returns the match for one descriptor that an operator gave
// limits of its own (the admin API's descriptor overrides): the limits
// apply to that descriptor alone (these entries, in this order), in place
// of whatever the domain's tree or the descriptor's own limit says, never
// in shadow mode and taking no part in replaces. Its policy is named
// "<domain>//admin", a name no node of a tree nor a request's own limit
// can have, and its counter key encodes every key and value, so it shares
// no counter with either, nor with another descriptor's override. Its
// MetricKey is "<domain>.admin_override": never a value. Errors wrap
// sluice.ErrInvalidLimit.
func KeyOverride(domain string, entries []Entry, limits ...sluice.Limit) (Match, error) {
	p, err := sluice.NewPolicy(PolicyName(domain, []string{"", "admin"}), limits...)
	if err != nil {
		return Match{}, fmt.Errorf("descriptor: a descriptor override: %w", err)
	}
	r := &Rule{Domain: domain, Policy: p, MetricKey: domain + ".admin_override"}
	for _, l := range limits {
		r.Displays = append(r.Displays, displayOf(l))
	}
	es := append([]Entry(nil), entries...)
	return Match{Rule: r, Key: overrideCounterKey(es), entries: es}, nil
}

// checkEnforce checks the Enforce of d, a node with a rate limit at path.
func (b *builder) checkEnforce(d Descriptor, path []string, vars []bool) {
	switch {
	case d.RateLimit.Unlimited:
		b.fail(path, "enforce is not for an unlimited rate_limit")
	case d.ShadowMode:
		b.fail(path, "enforce with shadow_mode: shadow_mode already leaves every counter in shadow mode")
	case !slices.Contains(vars, true):
		b.fail(path, "enforce needs a level counted per value (an entry without a value, or a wildcard without share_threshold): this descriptor has one counter, enforced or not as a whole")
	default:
		if err := d.Enforce.Validate(); err != nil {
			b.fail(path, "%v", err)
		}
	}
}

// Shadow reports whether the match's limit reports without denying: a
// rule in shadow mode or in quota mode (which the service also reports in
// the response's metadata), or a counter its Enforce does not enforce.
// False without a rule.
func (m Match) Shadow() bool {
	r := m.Rule
	return r != nil && (r.ShadowMode || r.QuotaMode || !r.Enforce.Enforces(r.MetricKey, m.Key))
}

func cloneRollout(r *sluice.Rollout) *sluice.Rollout {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
)

// ruleFields are the fields of a rule (rules[]).
var ruleFields = []string{"name", "match", "key", "missing", "algorithm", "limit", "period", "calendar", "burst", "tiers", "action", "max_delay", "count", "allow", "penalty", "concurrency", "adaptive", "lease", "enforce", "sync", "sync_interval"}

// tierLimitFields are the fields of one of a rule's tiers (rules[].tiers.NAME).
var tierLimitFields = []string{"algorithm", "limit", "period", "calendar", "burst"}

// matchFields are the fields of a rule's match.
var matchFields = []string{"path", "paths", "methods", "hosts"}

func (d *decoder) rules(n *yaml.Node, tiers httplimit.Tiers) []httplimit.Rule {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.add(n, "rules", "want a list of rules, got %s", found(n))
		return nil
	}
	if len(n.Content) == 0 {
		d.add(n, "rules", "want at least one rule")
	}
	var out []httplimit.Rule
	names := map[string]int{}
	for i, rn := range n.Content {
		path := fmt.Sprintf("rules[%d]", i)
		r, ok := d.rule(rn, path)
		if !ok {
			continue
		}
		if j, dup := names[r.Name]; dup {
			d.add(rn, path+".name", "%q is also the name of rules[%d]; names must be unique", r.Name, j)
			continue
		}
		names[r.Name] = i
		if tiers.Keys != nil {
			for t := range r.Tiers {
				if t != tiers.Default && !slices.Contains(mapValues(tiers.Keys), t) {
					d.add(rn, path+".tiers."+t, "no entry of tiers.keys maps to tier %q, and it is not the default tier", t)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// limitSpec is the limit fields of a rule or a tier, as written.
type limitSpec struct {
	alg                   sluice.Algorithm
	count, burst          int64
	period                time.Duration
	hasAlg, hasCount      bool
	hasPeriod, hasBurst   bool
	algNode, countNode    *yaml.Node
	periodNode, burstNode *yaml.Node
	unit                  calendar.Unit // for period: day, week, month or year
	cal                   *calSpec      // the calendar mapping, if written
}

func (d *decoder) limitField(key string, v *yaml.Node, path string, l *limitSpec) {
	p := path + "." + key
	switch key {
	case "algorithm":
		l.hasAlg = true
		if s, ok := d.str(v, p); ok {
			a, err := sluice.ParseAlgorithm(s)
			if err != nil {
				d.add(v, p, "unknown algorithm %q (want token_bucket, gcra, fixed_window, sliding_window or sliding_log)", s)
				return
			}
			l.alg, l.hasAlg, l.algNode = a, true, v
		}
	case "limit":
		l.hasCount = true
		if c, ok := d.integer(v, p, 1, 1_000_000_000_000); ok {
			l.count, l.hasCount, l.countNode = c, true, v
		}
	case "period":
		l.hasPeriod = true
		if t, u, ok := d.period(v, p); ok {
			l.period, l.unit, l.periodNode = t, u, v
		}
	case "calendar":
		l.cal = d.calendar(v, p)
	case "burst":
		l.hasBurst = true
		if b, ok := d.integer(v, p, 1, 1_000_000_000_000); ok {
			l.burst, l.hasBurst, l.burstNode = b, true, v
		}
	}
}

// check validates a built limit, reporting the problem at the field it
// concerns.
func (d *decoder) check(l sluice.Limit, spec *limitSpec, node *yaml.Node, path string) bool {
	err := l.Validate()
	if err == nil {
		return true
	}
	msg := reason(err)
	at, field := node, ""
	switch {
	case strings.Contains(msg, "burst") && spec.burstNode != nil:
		at, field = spec.burstNode, ".burst"
	case strings.Contains(msg, "period") && spec.periodNode != nil:
		at, field = spec.periodNode, ".period"
	case (strings.Contains(msg, "count") || strings.Contains(msg, "rate")) && spec.countNode != nil:
		at, field = spec.countNode, ".limit"
	}
	d.add(at, path+field, "%s", msg)
	return false
}

func (d *decoder) rule(n *yaml.Node, path string) (httplimit.Rule, bool) {
	var r httplimit.Rule
	var spec limitSpec
	var keyNode, actionNode, maxDelayNode, countNode, allowNode, penaltyNode *yaml.Node
	var concNode, leaseNode, enforceNode, adaptiveNode *yaml.Node
	var sn syncNodes
	var conc httplimit.ConcurrencyRule
	var adaptiveSpec *adaptiveSpec
	isAdaptive := false
	tierSpecs := map[string]*limitSpec{}
	tierNodes := map[string]*yaml.Node{}
	var tierOrder []string
	before := len(d.err.Problems)
	hasName := false
	d.fields(n, path, ruleFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		if d.syncField(key, v, p, &r.Sync, &sn) {
			return
		}
		switch key {
		case "name":
			if s, ok := d.str(v, p); ok {
				hasName = true
				if err := httplimit.CheckName("rule", s); err != nil {
					d.add(v, p, "%s", reason(err))
				}
				r.Name = s
			}
		case "match":
			d.match(v, p, &r.Match)
		case "key":
			keyNode = v
			if ss, ok := d.strings(v, p, true); ok {
				for i, s := range ss {
					k, err := httplimit.ParseKeyPart(s)
					if err != nil {
						at := resolve(v)
						if at.Kind == yaml.SequenceNode {
							at = at.Content[i]
						}
						d.add(at, fmt.Sprintf("%s[%d]", p, i), "%s", reason(err))
						continue
					}
					r.Key = append(r.Key, k)
				}
			}
		case "missing":
			if s, ok := d.str(v, p); ok {
				m, err := httplimit.ParseMissing(s)
				if err != nil {
					d.add(v, p, "want ip or skip, got %q", s)
					return
				}
				r.Missing = m
			}
		case "action":
			actionNode = v
			if s, ok := d.str(v, p); ok {
				a, err := httplimit.ParseAction(s)
				if err != nil {
					d.add(v, p, "want reject, delay, shadow, soft or exempt, got %q", s)
					return
				}
				r.Action = a
			}
		case "allow":
			allowNode = v
			r.Allow = d.listNames(v, p)
		case "max_delay":
			maxDelayNode = v
			if t, ok := d.duration(v, p, time.Millisecond, sluice.MaxWait); ok {
				r.MaxDelay = t
			}
		case "count":
			countNode = v
			r.Count = d.count(v, p)
		case "penalty":
			penaltyNode = v
			r.Penalty = d.penalty(v, p)
		case "enforce":
			enforceNode = v
			r.Enforce = d.rollout(v, p)
		case "concurrency":
			concNode = v
			if rv := resolve(v); rv.Kind == yaml.ScalarNode && rv.Tag == "!!str" {
				if rv.Value != "adaptive" {
					d.add(v, p, "want a whole number (the most requests in flight per key) or adaptive (a limit that follows the upstream's latency), got %q", rv.Value)
				}
				isAdaptive = true
				return
			}
			if c, ok := d.integer(v, p, 1, sluice.MaxConcurrency); ok {
				conc.Limit = c
			}
		case "adaptive":
			adaptiveNode = v
			adaptiveSpec = d.adaptiveOptions(v, p)
		case "lease":
			leaseNode = v
			if t, ok := d.duration(v, p, sluice.MinLease, sluice.MaxLease); ok {
				conc.Lease = t
			}
		case "tiers":
			v = resolve(v)
			if v.Kind != yaml.MappingNode {
				d.add(v, p, "want a mapping from tier name to { limit, burst, period, algorithm }, got %s", found(v))
				return
			}
			for i := 0; i+1 < len(v.Content); i += 2 {
				tk, tv := v.Content[i], v.Content[i+1]
				name := tk.Value
				tp := p + "." + name
				if err := httplimit.CheckName("tier", name); err != nil {
					d.add(tk, tp, "%s", reason(err))
					continue
				}
				if _, dup := tierSpecs[name]; dup {
					d.add(tk, tp, "appears twice")
					continue
				}
				ts := &limitSpec{}
				d.fields(tv, tp, tierLimitFields, func(key string, v *yaml.Node) {
					d.limitField(key, v, tp, ts)
				})
				tierSpecs[name], tierNodes[name] = ts, tv
				tierOrder = append(tierOrder, name)
			}
		default:
			d.limitField(key, v, path, &spec)
		}
	})
	if resolve(n).Kind != yaml.MappingNode {
		return r, false
	}
	if !hasName {
		d.add(n, path+".name", "missing: every rule needs a name")
	}
	if r.Action == httplimit.Exempt {
		for _, f := range []struct {
			set  bool
			name string
		}{{keyNode != nil, "key"}, {spec.hasAlg, "algorithm"}, {spec.hasCount, "limit"}, {spec.hasPeriod, "period"}, {spec.cal != nil, "calendar"}, {spec.hasBurst, "burst"}, {len(tierSpecs) > 0, "tiers"}, {maxDelayNode != nil, "max_delay"}, {countNode != nil, "count"}, {allowNode != nil, "allow"}, {penaltyNode != nil, "penalty"}, {enforceNode != nil, "enforce"}, {concNode != nil, "concurrency"}, {adaptiveNode != nil, "adaptive"}, {leaseNode != nil, "lease"}, {sn.mode != nil, "sync"}, {sn.interval != nil, "sync_interval"}} {
			if f.set {
				d.add(actionNode, path+"."+f.name, "an exempt rule takes no %s", f.name)
			}
		}
		return r, len(d.err.Problems) == before
	}
	if adaptiveNode != nil && !isAdaptive {
		d.add(adaptiveNode, path+".adaptive", "only for a rule with concurrency: adaptive")
	}
	if isAdaptive {
		return d.adaptiveRule(n, path, r, adaptiveSpec, conc.Lease, leaseNode, actionNode, maxDelayNode, map[string]bool{
			"key": keyNode != nil, "algorithm": spec.hasAlg, "limit": spec.hasCount, "period": spec.hasPeriod, "calendar": spec.cal != nil, "burst": spec.hasBurst,
			"tiers": len(tierSpecs) > 0, "count": countNode != nil, "penalty": penaltyNode != nil, "enforce": enforceNode != nil,
			"sync": sn.mode != nil, "sync_interval": sn.interval != nil,
		}, before)
	}
	if concNode != nil || leaseNode != nil {
		return d.concurrencyRule(n, path, r, conc, &spec, before, concNode, leaseNode, actionNode, maxDelayNode, map[string]bool{
			"calendar": spec.cal != nil || spec.unit != 0,
			"tiers":    len(tierSpecs) > 0, "count": countNode != nil, "penalty": penaltyNode != nil, "enforce": enforceNode != nil,
			"sync": sn.mode != nil, "sync_interval": sn.interval != nil,
		})
	}
	d.checkSync(sn, r.Sync, path)
	for _, f := range []struct {
		set  bool
		name string
	}{{spec.hasAlg, "algorithm"}, {spec.hasCount, "limit"}, {spec.hasPeriod, "period"}} {
		if !f.set {
			d.add(n, path+"."+f.name, "missing: every rule that is not exempt needs algorithm, limit and period")
		}
	}
	if len(d.err.Problems) > before {
		return r, false
	}
	cal, ok := d.calendarOf(&spec, spec.unit, nil, path)
	if !ok {
		return r, false
	}
	r.Limit = sluice.Limit{Algorithm: spec.alg, Count: spec.count, Period: spec.period, Burst: spec.burst, Calendar: cal}
	ok = d.check(r.Limit, &spec, n, path)
	if len(tierOrder) > 0 {
		r.Tiers = make(map[string]sluice.Limit, len(tierOrder))
	}
	for _, name := range tierOrder {
		ts := tierSpecs[name]
		l := r.Limit
		if ts.hasAlg {
			l.Algorithm = ts.alg
		}
		unit := spec.unit
		if ts.hasPeriod {
			l.Period, unit = ts.period, ts.unit
		}
		if ts.hasPeriod || ts.cal != nil {
			c, cok := d.calendarOf(ts, unit, spec.cal, path+".tiers."+name)
			if !cok {
				ok = false
				continue
			}
			l.Calendar = c
		}
		if ts.hasCount {
			// A tier that sets its limit gets a burst of its own limit
			// unless it sets one: the rule's burst was sized for the
			// rule's limit.
			l.Count, l.Burst = ts.count, 0
		}
		if ts.hasBurst {
			l.Burst = ts.burst
		}
		if !l.Algorithm.IsBucket() && !ts.hasBurst {
			l.Burst = 0
		}
		if d.check(l, ts, tierNodes[name], path+".tiers."+name) {
			r.Tiers[name] = l
		} else {
			ok = false
		}
	}
	if !ok {
		return r, false
	}
	if err := r.Validate(); err != nil {
		msg := reason(err)
		at, field := n, ""
		switch {
		case strings.Contains(msg, "enforce") && enforceNode != nil:
			at, field = enforceNode, ".enforce"
		case strings.Contains(msg, "sync") && sn.mode != nil:
			at, field = sn.mode, ".sync"
		case strings.Contains(msg, "penalty") && penaltyNode != nil:
			at, field = penaltyNode, ".penalty"
		case strings.Contains(msg, "count") && countNode != nil:
			at, field = countNode, ".count"
		case strings.Contains(msg, "max delay") && maxDelayNode != nil:
			at, field = maxDelayNode, ".max_delay"
		case strings.Contains(msg, "max delay"):
			field = ".max_delay"
		case strings.Contains(msg, "action") && actionNode != nil:
			at, field = actionNode, ".action"
		case strings.Contains(msg, "path"):
			field = ".match"
		}
		d.add(at, path+field, "%s", msg)
		return r, false
	}
	return r, true
}

func (d *decoder) match(n *yaml.Node, path string, m *httplimit.Match) {
	d.fields(n, path, matchFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		ss, ok := d.strings(v, p, true)
		if !ok {
			return
		}
		switch key {
		case "path", "paths":
			for i, s := range ss {
				if !strings.HasPrefix(s, "/") || strings.Contains(s[:len(s)-1], "*") || (strings.HasSuffix(s, "*") && !strings.HasSuffix(s, "/*")) {
					at := resolve(v)
					if at.Kind == yaml.SequenceNode {
						at = at.Content[i]
					}
					d.add(at, p, "path %q must start with / and may end in /* (no other wildcards)", s)
					continue
				}
				m.Paths = append(m.Paths, s)
			}
		case "methods":
			for _, s := range ss {
				m.Methods = append(m.Methods, strings.ToUpper(s))
			}
		case "hosts":
			for i, s := range ss {
				if _, err := netip.ParseAddr(s); err != nil && (s == "" || strings.ContainsAny(strings.TrimPrefix(s, "*."), "*:/ ")) {
					at := resolve(v)
					if at.Kind == yaml.SequenceNode {
						at = at.Content[i]
					}
					d.add(at, p, "host %q must be a host name without port, optionally starting with *.", s)
					continue
				}
				m.Hosts = append(m.Hosts, s)
			}
		}
	})
}

// concurrencyRule finishes a rule that sets concurrency or lease: a limit
// on requests in flight, which takes both, and optionally a rate limit
// (algorithm, limit, period and burst, as a rate rule's) decided with it,
// but no calendar period, tiers, count, penalty, enforce or sync.
func (d *decoder) concurrencyRule(n *yaml.Node, path string, r httplimit.Rule, conc httplimit.ConcurrencyRule, spec *limitSpec, before int, concNode, leaseNode, actionNode, maxDelayNode *yaml.Node, rateFields map[string]bool) (httplimit.Rule, bool) {
	if rateFields["calendar"] {
		d.add(n, path+".period", "a concurrency rule (one with concurrency and lease) takes no calendar period: give its rate a duration, and put a calendar quota in a rule of its own")
		return r, false
	}
	for _, f := range []string{"tiers", "count", "penalty", "enforce", "sync", "sync_interval"} {
		if rateFields[f] {
			d.add(n, path+"."+f, "a concurrency rule (one with concurrency and lease) takes no %s", f)
		}
	}
	if spec.hasAlg || spec.hasCount || spec.hasPeriod || spec.hasBurst {
		for _, f := range []struct {
			set  bool
			name string
		}{{spec.hasAlg, "algorithm"}, {spec.hasCount, "limit"}, {spec.hasPeriod, "period"}} {
			if !f.set {
				d.add(n, path+"."+f.name, "missing: a concurrency rule with a rate limit needs algorithm, limit and period")
			}
		}
		if len(d.err.Problems) == before {
			r.Limit = sluice.Limit{Algorithm: spec.alg, Count: spec.count, Period: spec.period, Burst: spec.burst}
			d.check(r.Limit, spec, n, path)
		}
	}
	if concNode == nil {
		d.add(n, path+".concurrency", "missing: a rule with a lease needs concurrency, the most requests in flight at once")
	}
	if leaseNode == nil {
		d.add(n, path+".lease", "missing: a rule with concurrency needs a lease, how long a slot outlives a process that dies")
	}
	if len(d.err.Problems) > before {
		return r, false
	}
	r.Concurrency = &conc
	if err := r.Validate(); err != nil {
		msg := reason(err)
		at, field := n, ""
		switch {
		case strings.Contains(msg, "max delay") && maxDelayNode != nil:
			at, field = maxDelayNode, ".max_delay"
		case strings.Contains(msg, "max delay"):
			field = ".max_delay"
		case strings.Contains(msg, "action") && actionNode != nil:
			at, field = actionNode, ".action"
		case strings.Contains(msg, "lease"):
			at, field = leaseNode, ".lease"
		case strings.Contains(msg, "concurrency"):
			at, field = concNode, ".concurrency"
		case strings.Contains(msg, "path"):
			field = ".match"
		}
		d.add(at, path+field, "%s", msg)
		return r, false
	}
	return r, true
}

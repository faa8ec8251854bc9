package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server/backend"
)

// adaptiveFields are the fields of an adaptive concurrency rule's
// controller (rules[].adaptive).
var adaptiveFields = []string{"min", "max", "initial", "tolerance", "smoothing", "window", "probe_interval", "max_queue", "shares", "retry_after", "fleet"}

// sharesFields are the fields of rules[].adaptive.shares.
var sharesFields = []string{"default", "sheddable"}

// priorityFields are the fields of priority.
var priorityFields = []string{"from", "routes", "tiers", "default"}

// priorityRouteFields are the fields of one of priority.routes.
var priorityRouteFields = []string{"match", "class"}

// adaptiveSpec is a rule's adaptive mapping, as written.
type adaptiveSpec struct {
	o     adaptive.Options
	fleet int64
	nodes map[string]*yaml.Node // by field, for problems found later
}

// adaptiveOptions decodes rules[].adaptive.
func (d *decoder) adaptiveOptions(n *yaml.Node, path string) *adaptiveSpec {
	s := &adaptiveSpec{nodes: map[string]*yaml.Node{}}
	d.fields(n, path, adaptiveFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		s.nodes[key] = v
		intField := func(dst *int) {
			if i, ok := d.integer(v, p, 1, adaptive.MaxLimit); ok {
				*dst = int(i)
			}
		}
		switch key {
		case "min":
			intField(&s.o.MinLimit)
		case "max":
			intField(&s.o.MaxLimit)
		case "initial":
			intField(&s.o.InitialLimit)
		case "max_queue":
			intField(&s.o.MaxQueue)
		case "tolerance":
			s.o.Tolerance = d.share(v, p)
		case "smoothing":
			s.o.Smoothing = d.share(v, p)
		case "window":
			if t, ok := d.duration(v, p, time.Millisecond, time.Minute); ok {
				s.o.Window = t
			}
		case "probe_interval":
			if t, ok := d.duration(v, p, 10*time.Millisecond, 24*time.Hour); ok {
				s.o.ProbeInterval = t
			}
		case "retry_after":
			if t, ok := d.duration(v, p, time.Second, time.Hour); ok {
				if t%time.Second != 0 {
					d.add(v, p, "want whole seconds (Retry-After counts seconds), got %v", t)
					return
				}
				s.o.RetryAfter = t
			}
		case "shares":
			d.fields(v, p, sharesFields, func(k string, v *yaml.Node) {
				switch k {
				case "default":
					s.o.Shares.Default = d.share(v, p+"."+k)
				case "sheddable":
					s.o.Shares.Sheddable = d.share(v, p+"."+k)
				}
			})
		case "fleet":
			if i, ok := d.integer(v, p, 1, sluice.MaxConcurrency); ok {
				s.fleet = i
			}
		}
	})
	return s
}

// share decodes a percentage above 0% (see ParsePercent) as a fraction;
// 0 after a problem.
func (d *decoder) share(v *yaml.Node, p string) float64 {
	s, ok := d.scalar(v, p)
	if !ok {
		return 0
	}
	f, err := ParsePercent(s)
	switch {
	case err != nil:
		d.add(v, p, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), ErrPercent.Error()), ": "))
		return 0
	case f == 0:
		d.add(v, p, "want more than 0%%, got %q", s)
		return 0
	}
	return f / 100
}

// adaptiveRule finishes a rule that says concurrency: adaptive: its
// controller's options from the adaptive mapping, its queue from action
// delay and max_delay, its fleet limit with its lease; no key, rate,
// tiers, count, penalty, enforce or sync.
func (d *decoder) adaptiveRule(n *yaml.Node, path string, r httplimit.Rule, spec *adaptiveSpec, lease time.Duration, leaseNode, actionNode, maxDelayNode *yaml.Node, others map[string]bool, before int) (httplimit.Rule, bool) {
	for _, f := range []string{"key", "algorithm", "limit", "period", "calendar", "burst", "tiers", "count", "penalty", "enforce", "sync", "sync_interval"} {
		if others[f] {
			d.add(n, path+"."+f, "an adaptive concurrency rule (concurrency: adaptive) takes no %s: it has one limit, learned from the upstream's latency, for every request it matches", f)
		}
	}
	if spec == nil {
		spec = &adaptiveSpec{nodes: map[string]*yaml.Node{}}
	}
	switch r.Action {
	case httplimit.Reject:
	case httplimit.Delay:
		switch {
		case maxDelayNode == nil:
			d.add(actionNode, path+".max_delay", "missing: action delay needs max_delay, the longest a request waits in the queue for a slot")
		case r.MaxDelay > adaptive.MaxWait:
			d.add(maxDelayNode, path+".max_delay", "an adaptive concurrency rule's requests wait at most %v, not %v", adaptive.MaxWait, r.MaxDelay)
		}
		spec.o.MaxWait = r.MaxDelay
		r.Action, r.MaxDelay = httplimit.Reject, 0
	default:
		d.add(actionNode, path+".action", "an adaptive concurrency rule's action is reject (shed at once) or delay (wait up to max_delay in the queue), not %s", r.Action)
	}
	if r.Action == httplimit.Reject && maxDelayNode != nil && spec.o.MaxWait == 0 {
		d.add(maxDelayNode, path+".max_delay", "max delay is only for action delay")
	}
	switch {
	case spec.fleet > 0 && leaseNode == nil:
		d.add(spec.nodes["fleet"], path+".lease", "missing: a fleet limit needs a lease, how long a slot of it outlives a gateway that dies")
	case spec.fleet == 0 && leaseNode != nil:
		d.add(leaseNode, path+".lease", "an adaptive concurrency rule takes a lease only with adaptive.fleet, a limit shared by the gateways")
	}
	if len(d.err.Problems) > before {
		return r, false
	}
	lim, err := adaptive.New(spec.o)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), adaptive.ErrInvalidOptions.Error()+": ")
		field := ""
		for _, f := range []struct{ word, field string }{
			{"min limit", "min"}, {"max limit", "max"}, {"initial limit", "initial"}, {"probe interval", "probe_interval"},
			{"sheddable share", "shares"}, {"default share", "shares"}, {"max queue", "max_queue"}, {"window", "window"},
		} {
			if strings.HasPrefix(msg, f.word) {
				field = f.field
				break
			}
		}
		at := n
		if v := spec.nodes[field]; v != nil {
			at = v
		}
		d.add(at, path+".adaptive."+field, "%s", msg)
		return r, false
	}
	r.Concurrency = &httplimit.ConcurrencyRule{Adaptive: lim, Limit: spec.fleet, Lease: lease}
	if err := r.Validate(); err != nil {
		msg := reason(err)
		at, field := n, ""
		if strings.Contains(msg, "path") {
			field = ".match"
		}
		d.add(at, path+field, "%s", msg)
		return r, false
	}
	return r, true
}

// priority decodes the priority section into p.
func (d *decoder) priority(n *yaml.Node, p *httplimit.Priority, tiers httplimit.Tiers) {
	class := func(v *yaml.Node, path string) (adaptive.Class, bool) {
		s, ok := d.str(v, path)
		if !ok {
			return 0, false
		}
		c, err := adaptive.ParseClass(s)
		if err != nil {
			d.add(v, path, "want critical, default or sheddable, got %q", s)
			return 0, false
		}
		return c, true
	}
	d.fields(n, "priority", priorityFields, func(key string, v *yaml.Node) {
		path := "priority." + key
		switch key {
		case "from":
			d.tierPart(v, path, "a class cannot come from global: want the header a trusted layer sets, or a token's claim, such as jwt:priority", &p.From)
		case "default":
			if c, ok := class(v, path); ok {
				p.Default = c
			}
		case "tiers":
			v = resolve(v)
			if v.Kind != yaml.MappingNode {
				d.add(v, path, "want a mapping from tier name to class (critical, default or sheddable), got %s", found(v))
				return
			}
			p.Tiers = make(map[string]adaptive.Class, len(v.Content)/2)
			for i := 0; i+1 < len(v.Content); i += 2 {
				k, cv := v.Content[i], v.Content[i+1]
				tp := path + "." + k.Value
				if err := httplimit.CheckName("tier", k.Value); err != nil {
					d.add(k, tp, "%s", reason(err))
					continue
				}
				if _, dup := p.Tiers[k.Value]; dup {
					d.add(k, tp, "appears twice")
					continue
				}
				if c, ok := class(cv, tp); ok {
					p.Tiers[k.Value] = c
				}
			}
			if tiers.From == (httplimit.KeyPart{}) {
				d.add(v, path, "needs tiers.from: without it every request is in the default tier (%s); give priority.default instead", tiers.Default)
			}
		case "routes":
			v = resolve(v)
			if v.Kind != yaml.SequenceNode {
				d.add(v, path, "want a list of { match, class }, got %s", found(v))
				return
			}
			for i, rn := range v.Content {
				rp := fmt.Sprintf("%s[%d]", path, i)
				var route httplimit.PriorityRoute
				hasClass := false
				d.fields(rn, rp, priorityRouteFields, func(k string, v *yaml.Node) {
					switch k {
					case "match":
						d.match(v, rp+".match", &route.Match)
					case "class":
						route.Class, hasClass = class(v, rp+".class")
					}
				})
				if resolve(rn).Kind == yaml.MappingNode && !hasClass && lookup(rn, "class") == nil {
					d.add(rn, rp+".class", "missing: a route gives the requests it matches a class: critical, default or sheddable")
				}
				p.Routes = append(p.Routes, route)
			}
		}
	})
}

// checkAdaptive reports, among valid rules, a fleet limit on a store that
// the gateways do not share (b, the chosen backend), and a priority section
// that no adaptive concurrency rule uses.
func (d *decoder) checkAdaptive(rulesNode, priorityNode *yaml.Node, c *Config, b backend.Backend) {
	nodes := resolve(rulesNode).Content
	adaptiveRules := 0
	for i, r := range c.Limiter.Rules {
		if r.Concurrency == nil || r.Concurrency.Adaptive == nil {
			continue
		}
		adaptiveRules++
		if r.Concurrency.Limit > 0 && !b.Shared && i < len(nodes) {
			through, names := backend.Sharing()
			d.add(lookup(nodes[i], "adaptive", "fleet"), fmt.Sprintf("rules[%d].adaptive.fleet", i), "a fleet limit is shared by the gateways through %s (store.backend: %s); with the %s store there is one gateway, whose own limit is the rule's", through, names, b.Name)
		}
	}
	if priorityNode != nil && adaptiveRules == 0 {
		d.add(priorityNode, "priority", "only adaptive concurrency rules (concurrency: adaptive) use the classes, and no rule is one")
	}
}

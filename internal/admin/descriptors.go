package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/internal/rls"
)

// descriptorBody names one descriptor of the rate-limit service, as Envoy
// sends it.
type descriptorBody struct {
	Domain  string             `json:"domain"`
	Entries []descriptor.Entry `json:"entries"`
}

// descriptorOverrideBody is the body of PUT on a descriptor override.
type descriptorOverrideBody struct {
	Limits []overrides.Limit `json:"limits"`
	Until  string            `json:"until,omitempty"` // RFC 3339; empty for forever
}

// descriptorRule is a rule of the tree, as show reports it.
type descriptorRule struct {
	Name       string `json:"name,omitempty"`
	Path       string `json:"path"`   // its metric key, such as api.client
	Policy     string `json:"policy"` // the policy that keeps its counters
	ShadowMode bool   `json:"shadow_mode,omitempty"`
	DenyAll    bool   `json:"deny_all,omitempty"`
	// Enforce is the share of counters the rule is enforced on, in
	// percent; absent for every counter.
	Enforce *float64 `json:"enforce_percent,omitempty"`
	// Penalty is the rule's penalty, if it has one.
	Penalty *penaltyJSON `json:"penalty,omitempty"`
}

// penaltyJSON is a rule's penalty as the configuration writes it.
type penaltyJSON struct {
	After  int      `json:"after"`
	Blocks []string `json:"blocks"`
	Forget string   `json:"forget"`
}

// descriptorState is what show answers: the limit that applies to a
// descriptor and its counter's state.
type descriptorState struct {
	Domain  string             `json:"domain"`
	Entries []descriptor.Entry `json:"entries"`
	// Applies is "rule" (the tree's), "override" (an operator's),
	// "deny_list" (List refuses every request carrying the descriptor) or
	// "none"; NoLimit says why none applies.
	Applies string `json:"applies"`
	List    string `json:"list,omitempty"`
	// Rule is the tree's rule: the one that applies, or the one an
	// override replaces.
	Rule     *descriptorRule       `json:"rule,omitempty"`
	NoLimit  string                `json:"no_limit,omitempty"`
	Override *overrides.Descriptor `json:"override,omitempty"`
	Key      string                `json:"key"`
	// Shadow is set when the rule counts this descriptor but never denies
	// it: shadow_mode, or a counter its enforce leaves in shadow mode.
	Shadow bool        `json:"shadow,omitempty"`
	Limits []limitJSON `json:"limits,omitempty"`
	// State is the binding limit's (limits[limit_index]): the one with the
	// fewest units remaining, or the one that denies the longest.
	LimitIndex int        `json:"limit_index"`
	State      *stateJSON `json:"state,omitempty"`
	// BlockedSeconds is how long the rule's penalty still blocks the
	// counter key (state then says allowed false, with the block's end as
	// retry_after_seconds); absent when it is not blocked.
	BlockedSeconds float64 `json:"blocked_seconds,omitempty"`
}

// Why no limit applies to a descriptor.
const (
	noRule    = "the descriptor matches no rule of the domain"
	allowList = "the descriptor reaches an allow-list entry (a descriptor without a rate_limit)"
	unlimited = "the descriptor's rule is unlimited"
)

// noLimit says why no rule applies to a descriptor.
func noLimit(rules rls.Rules, b *descriptorBody) string {
	if al, ok := rules.(interface {
		AllowListed(string, []descriptor.Entry) bool
	}); ok && al.AllowListed(b.Domain, b.Entries) {
		return allowList
	}
	return noRule
}

func (a *api) service(w http.ResponseWriter, st State) bool {
	if st.Service == nil || a.opts.Descriptors == nil {
		problem.Write(w, http.StatusNotFound, "no rate-limit service runs: add a service section to the config file")
		return false
	}
	return true
}

// descriptorProblem answers the problem of an error of the service's
// inspection.
func descriptorProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, rls.ErrUnknownDomain):
		problem.Write(w, http.StatusNotFound, err.Error())
	case errors.Is(err, rls.ErrInvalidRequest):
		problem.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), rls.ErrInvalidRequest.Error()+": "))
	default:
		problem.Write(w, http.StatusServiceUnavailable, err.Error())
	}
}

func (a *api) parseDescriptor(w http.ResponseWriter, r *http.Request) (*descriptorBody, bool) {
	var b descriptorBody
	if !decode(w, r, &b) {
		return nil, false
	}
	if b.Domain == "" || len(b.Entries) == 0 {
		problem.Write(w, http.StatusBadRequest, `give domain and entries, such as {"domain": "api", "entries": [{"key": "client", "value": "a"}]}`)
		return nil, false
	}
	return &b, true
}

func ruleOf(r *descriptor.Rule) *descriptorRule {
	out := &descriptorRule{Name: r.Name, Path: r.MetricKey, ShadowMode: r.ShadowMode, DenyAll: r.DenyAll}
	if r.Policy != nil {
		out.Policy = r.Policy.Name()
		if pen, ok := r.Policy.Penalty(); ok {
			pj := &penaltyJSON{After: int(pen.Strikes()), Forget: pen.Forget.String()}
			for _, b := range pen.Blocks {
				pj.Blocks = append(pj.Blocks, b.String())
			}
			out.Penalty = pj
		}
	}
	if r.Enforce != nil {
		pct := r.Enforce.Percent
		out.Enforce = &pct
	}
	return out
}

func stateOf(rules rls.Rules, b *descriptorBody, ks rls.KeyState, ov *overrides.Descriptor) descriptorState {
	out := descriptorState{Domain: b.Domain, Entries: b.Entries, Applies: "none"}
	r := ks.Match.Rule
	switch {
	case ks.DeniedBy != "":
		out.Applies, out.List = "deny_list", ks.DeniedBy
		return out
	case ks.AllowList != "":
		out.List, out.NoLimit = ks.AllowList, "the descriptor carries a value on an allow list (service.allow)"
		return out
	case r == nil:
		out.NoLimit = noLimit(rules, b)
		return out
	case ks.Override:
		out.Applies, out.Override = "override", ov
		// The rule it overrides, if any, for reference.
		if tr := rules.Match(b.Domain, b.Entries).Rule; tr != nil {
			out.Rule = ruleOf(tr)
		}
	default:
		out.Applies, out.Rule = "rule", ruleOf(r)
	}
	out.Key = ks.Match.Key
	out.Shadow = !ks.Override && ks.Match.Shadow()
	if r.Unlimited {
		out.Applies, out.NoLimit = "none", unlimited
		return out
	}
	if r.Policy == nil { // deny-all: zero requests per unit
		out.State = &stateJSON{Allowed: false}
		return out
	}
	lims := r.Policy.Limits()
	for _, l := range lims {
		out.Limits = append(out.Limits, *limitToJSON(l))
	}
	d := ks.Decision
	if d.Index >= 0 && d.Index < len(lims) {
		out.LimitIndex = d.Index
		out.State = limitStateJSON(lims[d.Index], d)
	}
	out.BlockedSeconds = ks.Blocked.Seconds()
	return out
}

func (a *api) showDescriptor(w http.ResponseWriter, r *http.Request, st State) {
	if !a.service(w, st) {
		return
	}
	b, ok := a.parseDescriptor(w, r)
	if !ok {
		return
	}
	ks, err := st.Service.PeekDescriptor(r.Context(), b.Domain, b.Entries)
	if err != nil {
		descriptorProblem(w, err)
		return
	}
	var ov *overrides.Descriptor
	if ks.Override {
		if d, ok := a.opts.Descriptors.Get(overrides.DescriptorID(b.Domain, b.Entries)); ok {
			ov = &d
		}
	}
	reply(w, http.StatusOK, stateOf(st.Service.Rules(), b, ks, ov))
}

func (a *api) resetDescriptor(w http.ResponseWriter, r *http.Request, st State) {
	if !a.service(w, st) {
		return
	}
	b, ok := a.parseDescriptor(w, r)
	if !ok {
		return
	}
	ks, err := st.Service.ResetDescriptor(r.Context(), b.Domain, b.Entries)
	if err != nil {
		descriptorProblem(w, err)
		return
	}
	out := struct {
		Reset   bool   `json:"reset"`
		Applies string `json:"applies"`
		NoLimit string `json:"no_limit,omitempty"`
		Policy  string `json:"policy,omitempty"`
		Key     string `json:"key"`
	}{Key: ks.Match.Key, Applies: "rule"}
	switch rule := ks.Match.Rule; {
	case rule == nil:
		out.Applies, out.NoLimit = "none", noLimit(st.Service.Rules(), b)
	case rule.Unlimited:
		out.Applies, out.NoLimit = "none", unlimited
	case rule.Policy == nil:
		out.NoLimit = "the rule denies every request (zero requests per unit): it keeps no counter"
	default:
		out.Reset, out.Policy = true, rule.Policy.Name()
		if ks.Override {
			out.Applies = "override"
		}
		a.log.Info("admin API: descriptor reset", "domain", b.Domain, "policy", out.Policy)
	}
	reply(w, http.StatusOK, out)
}

// descriptorRoutes are the routes over descriptor overrides.
func (a *api) descriptorRoutes() *overrideRoutes[overrides.Descriptor] {
	o := &overrideRoutes[overrides.Descriptor]{a: a, root: "/admin/v1/descriptors/overrides", param: "id", rest: true,
		noun: "descriptor", list: "overrides", on: a.service, read: readDescriptor,
		logged: func(d overrides.Descriptor) []any {
			return []any{"domain", d.Domain, "descriptor", digest(d.ID), "limits", len(d.Limits), "until", d.Until}
		}}
	if a.opts.Descriptors != nil {
		o.set = &a.opts.Descriptors.Set
	}
	return o
}

// readDescriptor reads a PUT on a descriptor's override, and holds it to
// the rate-limit service in force.
func readDescriptor(w http.ResponseWriter, r *http.Request, st State, id string, _ bool) (overrides.Descriptor, func(overrides.Descriptor) any, bool) {
	domain, entries, err := overrides.ParseDescriptorID(id)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), overrides.ErrInvalid.Error()+": ")+" (a descriptor's ID is its domain and entries, such as api/client=a, with % / and = in them escaped as %XX)")
		return overrides.Descriptor{}, nil, false
	}
	if err := st.Service.CheckDescriptor(domain, entries); err != nil {
		descriptorProblem(w, err)
		return overrides.Descriptor{}, nil, false
	}
	var b descriptorOverrideBody
	if !decode(w, r, &b) {
		return overrides.Descriptor{}, nil, false
	}
	d := overrides.Descriptor{Domain: domain, Entries: entries, Limits: b.Limits}
	if b.Until != "" {
		t, err := time.Parse(time.RFC3339, b.Until)
		if err != nil {
			problem.Write(w, http.StatusBadRequest, fmt.Sprintf("until %q: want an RFC 3339 time such as 2026-12-31T00:00:00Z", b.Until))
			return overrides.Descriptor{}, nil, false
		}
		d.Until = t
	}
	// A limit without an algorithm gets that of the limit it overrides,
	// else envoyproxy/ratelimit's fixed window.
	def := "fixed_window"
	if m := st.Service.Rules().Match(domain, entries); m.Rule != nil && m.Rule.Policy != nil {
		def = m.Rule.Policy.Limits()[0].Algorithm.String()
	}
	for i := range d.Limits {
		if d.Limits[i].Algorithm == "" {
			d.Limits[i].Algorithm = def
		}
	}
	return d, nil, true
}

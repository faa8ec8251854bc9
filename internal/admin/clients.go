package admin

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/problem"
)

// clientBody is the body of PUT and PATCH on a client. For PATCH, absent
// fields keep their value, a rule's limit set to null is removed, and an
// until of "" means forever.
type clientBody struct {
	Tier   *string                     `json:"tier"`
	Limits map[string]*overrides.Limit `json:"limits"`
	Until  *string                     `json:"until"`  // RFC 3339
	Anchor *string                     `json:"anchor"` // a billing anchor such as "15T09:00"; "" for none
}

// clientRoutes are the routes over per-client overrides.
func (a *api) clientRoutes() *overrideRoutes[overrides.Client] {
	o := &overrideRoutes[overrides.Client]{a: a, root: "/admin/v1/clients", param: "client",
		noun: "client", list: "clients", read: a.readClient, patch: true,
		logged: func(e overrides.Client) []any {
			return []any{"client", digest(e.Client), "tier", e.Tier, "rules", len(e.Limits), "anchor", e.Anchor, "until", e.Until}
		}}
	if a.opts.Overrides != nil {
		o.set = &a.opts.Overrides.Set
	}
	return o
}

// readClient reads a PUT or PATCH on a client's override, and holds it to
// the configuration in force.
func (a *api) readClient(w http.ResponseWriter, r *http.Request, st State, client string, patch bool) (overrides.Client, func(overrides.Client) any, bool) {
	var b clientBody
	if !decode(w, r, &b) {
		return overrides.Client{}, nil, false
	}
	e := overrides.Client{Client: client}
	if patch {
		if old, ok := a.opts.Overrides.Get(client); ok {
			e = old
			e.Limits = make(map[string]overrides.Limit, len(old.Limits))
			for k, v := range old.Limits {
				e.Limits[k] = v
			}
		}
	}
	if b.Tier != nil {
		e.Tier = *b.Tier
	}
	for rule, l := range b.Limits {
		if e.Limits == nil {
			e.Limits = map[string]overrides.Limit{}
		}
		if l == nil {
			delete(e.Limits, rule)
		} else {
			e.Limits[rule] = *l
		}
	}
	if b.Anchor != nil {
		e.Anchor = *b.Anchor
	}
	if b.Until != nil {
		e.Until = time.Time{}
		if *b.Until != "" {
			t, err := time.Parse(time.RFC3339, *b.Until)
			if err != nil {
				problem.Write(w, http.StatusBadRequest, fmt.Sprintf("until %q: want an RFC 3339 time such as 2026-12-31T00:00:00Z", *b.Until))
				return overrides.Client{}, nil, false
			}
			e.Until = t
		}
	}
	if code, msg := check(st.Limiter, &e); code != 0 {
		problem.Write(w, code, msg)
		return overrides.Client{}, nil, false
	}
	answer := func(got overrides.Client) any {
		var warning string
		if b.Anchor != nil && got.Anchor != "" && !calendarQuotas(st.Limiter, got) {
			warning = fmt.Sprintf("the anchor %s has no effect: no rule has a calendar quota (period day, week, month or year), nor has the client's own limits", got.Anchor)
		}
		return clientReply{got, warning}
	}
	return e, answer, true
}

// clientReply is an override as PUT and PATCH answer it: with a warning
// when a setting the request made has no effect (an anchor, on a
// configuration without calendar quotas).
type clientReply struct {
	overrides.Client
	Warning string `json:"warning,omitempty"`
}

// calendarQuotas reports whether a billing anchor can apply to e's client:
// whether some rule (its default limit or a tier's) or e's own limits are
// calendar quotas.
func calendarQuotas(lim *httplimit.Limiter, e overrides.Client) bool {
	for _, name := range lim.Rules() {
		r, _ := lim.Rule(name)
		if r.Limit.Calendar != nil {
			return true
		}
		for _, l := range r.Tiers {
			if l.Calendar != nil {
				return true
			}
		}
	}
	for _, l := range e.Limits {
		switch l.Period {
		case "day", "week", "month", "year":
			return true
		}
	}
	return false
}

func (a *api) deleteClient(w http.ResponseWriter, r *http.Request, _ State) {
	client := r.PathValue("client")
	ok, err := a.opts.Overrides.Delete(r.Context(), client)
	switch {
	case err != nil:
		problem.Write(w, http.StatusServiceUnavailable, err.Error())
	case !ok:
		problem.Write(w, http.StatusNotFound, fmt.Sprintf("client %q has no override", client))
	default:
		a.log.Info("admin API: client override removed", "client", digest(client))
		w.WriteHeader(http.StatusNoContent)
	}
}

// check holds an override to the configuration in force: clients must be
// identified (tiers.from), the tier must be one a rule knows, and every
// rule must exist and take a limit. A limit without an algorithm gets its
// rule's. It returns the status and detail of a problem, or 0.
func check(lim *httplimit.Limiter, e *overrides.Client) (int, string) {
	if lim.TierSource() == (httplimit.KeyPart{}) {
		return http.StatusConflict, "overrides need tiers.from in the config file: the request attribute (such as header:X-API-Key) whose value identifies a client"
	}
	if e.Tier == "" && len(e.Limits) == 0 && e.Anchor == "" {
		return http.StatusBadRequest, "give a tier, limits or an anchor (to remove the override, DELETE it)"
	}
	if tiers := lim.TierNames(); e.Tier != "" && !slices.Contains(tiers, e.Tier) {
		return http.StatusBadRequest, fmt.Sprintf("unknown tier %q: the rules know %s", e.Tier, strings.Join(tiers, ", "))
	}
	for name, l := range e.Limits {
		rule, ok := lim.Rule(name)
		if !ok {
			return http.StatusBadRequest, fmt.Sprintf("no rule is named %q: the rules are %s", name, strings.Join(lim.Rules(), ", "))
		}
		if rule.Action == httplimit.Exempt {
			return http.StatusBadRequest, fmt.Sprintf("rule %q is exempt and takes no limit", name)
		}
		if l.Algorithm == "" {
			l.Algorithm = rule.Limit.Algorithm.String()
		}
		if rule.Action == httplimit.Delay && l.Algorithm != "token_bucket" && l.Algorithm != "gcra" {
			return http.StatusBadRequest, fmt.Sprintf("rule %q delays requests: its limit needs algorithm token_bucket or gcra, not %s", name, l.Algorithm)
		}
		e.Limits[name] = l
	}
	return 0, ""
}

// digest names a client in logs without revealing it (it may be a secret
// API key).
func digest(client string) string {
	return strings.TrimPrefix(httplimit.ClientPolicyName("", client), "@")
}

package admin

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/internal/topk"
)

// Observed is what the server saw of its traffic, for GET /admin/v1/top,
// GET /admin/v1/overview and the dashboard.
type Observed struct {
	// Rules holds the gateway's rules' heavy hitters, by rule name.
	Rules *topk.Set
	// Descriptors holds the rate-limit service's, by descriptor name
	// (such as api.client); nil without a service.
	Descriptors *topk.Set
	// ShowKey returns a key as the API shows it, a gateway rule's (rule
	// true) or a descriptor's: its values, or its digest when the store
	// hashes keys. Nil shows keys as they are.
	ShowKey func(key string, rule bool) string
	// Health returns the state of the store and the configuration.
	// Optional.
	Health func() Health
}

// Health is the state of the server's store and configuration.
type Health struct {
	// Backend is "memory" or "redis".
	Backend string `json:"backend"`
	// Degraded: decisions follow the store's on_error policy without
	// calling Redis.
	Degraded bool `json:"degraded"`
	// DegradedSince is when the store last became degraded, and
	// RecoveredAt when it last recovered; zero if never.
	DegradedSince time.Time `json:"degraded_since,omitzero"`
	RecoveredAt   time.Time `json:"recovered_at,omitzero"`
	// Config is the running configuration's hash, and Applied when it
	// was applied.
	Config  string    `json:"config,omitempty"`
	Applied time.Time `json:"applied,omitzero"`
	// Reloads and ReloadFailures count the reloads since the start.
	Reloads        uint64 `json:"reloads"`
	ReloadFailures uint64 `json:"reload_failures"`
	// LastFailure is why the last reload failed; empty if none did.
	LastFailure string `json:"last_failure,omitempty"`
}

// topEntry is one key in the answer of GET /admin/v1/top.
type topEntry struct {
	Key      string `json:"key"`
	Requests uint64 `json:"requests"`
	Limited  uint64 `json:"limited"`
	Error    uint64 `json:"error"`
}

// topReply is one rule's heavy hitters.
type topReply struct {
	Rule    string     `json:"rule"`
	By      string     `json:"by"`
	Window  int        `json:"window"` // seconds
	Entries []topEntry `json:"entries"`
}

// MaxTop is the most entries GET /admin/v1/top lists per rule.
const MaxTop = topk.Capacity

// topQuery is the parsed query of GET /admin/v1/top and /overview.
type topQuery struct {
	by     topk.By
	window topk.Window
	n      int
}

// parseTop reads by (limited, the default, or requests), window (60, the
// default, or 3600 seconds; minute or hour) and n (default def, at most
// MaxTop); it answers a bad one itself and returns false.
func parseTop(w http.ResponseWriter, r *http.Request, def int) (topQuery, bool) {
	q := topQuery{by: topk.ByLimited, window: topk.Minute, n: def}
	v := r.URL.Query()
	switch b := v.Get("by"); b {
	case "", "limited":
	case "requests":
		q.by = topk.ByRequests
	default:
		problem.Write(w, http.StatusBadRequest, fmt.Sprintf("by %q: want limited or requests", b))
		return q, false
	}
	switch s := v.Get("window"); s {
	case "", "60", "minute", "1m":
	case "3600", "hour", "1h":
		q.window = topk.Hour
	default:
		problem.Write(w, http.StatusBadRequest, fmt.Sprintf("window %q: want 60 (the last minute) or 3600 (the last hour)", s))
		return q, false
	}
	if s := v.Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTop {
			problem.Write(w, http.StatusBadRequest, fmt.Sprintf("n %q: want a whole number from 1 to %d", s, MaxTop))
			return q, false
		}
		q.n = n
	}
	return q, true
}

func byName(b topk.By) string {
	if b == topk.ByRequests {
		return "requests"
	}
	return "limited"
}

// ruleNames returns the rules in force, the gateway's in their order and
// then the service's descriptors that have decided something, sorted.
func (a *api) ruleNames(st State) []string {
	var names []string
	if st.Limiter != nil {
		names = st.Limiter.Rules()
	}
	if d := a.opts.Observed.Descriptors; d != nil && st.Service != nil {
		for _, n := range d.Names() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// sketch returns the sketch of a rule in force, or of a descriptor that
// has decided something; a rule in force that has decided nothing yet has
// an empty one.
func (a *api) sketch(st State, name string) (*topk.Sketch, bool) {
	o := a.opts.Observed
	if st.Limiter != nil && slices.Contains(st.Limiter.Rules(), name) {
		if k, ok := o.Rules.Lookup(name); ok {
			return k, true
		}
		return topk.New(time.Now()), true
	}
	if o.Descriptors != nil && st.Service != nil {
		return o.Descriptors.Lookup(name)
	}
	return nil, false
}

func (a *api) top(st State, k *topk.Sketch, name string, q topQuery) topReply {
	rule := st.Limiter != nil && slices.Contains(st.Limiter.Rules(), name)
	rep := k.Top(q.by, q.window, q.n)
	out := topReply{Rule: name, By: byName(q.by), Window: int(rep.Window / time.Second), Entries: make([]topEntry, len(rep.Entries))}
	for i, e := range rep.Entries {
		key := e.Key
		if a.opts.Observed.ShowKey != nil {
			key = a.opts.Observed.ShowKey(key, rule)
		}
		out.Entries[i] = topEntry{Key: key, Requests: e.Requests, Limited: e.Limited, Error: e.Error}
	}
	return out
}

// getTop answers GET /admin/v1/top: one rule's heavy hitters with
// ?rule=NAME, else every rule's, as {"rules": [...]}.
func (a *api) getTop(w http.ResponseWriter, r *http.Request, st State) {
	q, ok := parseTop(w, r, 10)
	if !ok {
		return
	}
	if name := r.URL.Query().Get("rule"); name != "" {
		k, ok := a.sketch(st, name)
		if !ok {
			problem.Write(w, http.StatusNotFound, fmt.Sprintf("no rule %q: the rules in force are %s", name, quoted(a.ruleNames(st))))
			return
		}
		reply(w, http.StatusOK, a.top(st, k, name, q))
		return
	}
	out := struct {
		Rules []topReply `json:"rules"`
	}{Rules: []topReply{}}
	for _, name := range a.ruleNames(st) {
		if k, ok := a.sketch(st, name); ok {
			out.Rules = append(out.Rules, a.top(st, k, name, q))
		}
	}
	reply(w, http.StatusOK, out)
}

func quoted(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(n)
	}
	return s
}

// RateSeconds is how many seconds of rates GET /admin/v1/overview gives.
const RateSeconds = 300

// overviewRule is one rule in GET /admin/v1/overview.
type overviewRule struct {
	Name string `json:"name"`
	// Kind is "rule" (the gateway's) or "descriptor" (the service's).
	Kind string `json:"kind"`
	// Start is the Unix second of the first count in each of the rates,
	// which hold one count a second, oldest first.
	Start         int64    `json:"start"`
	Allowed       []uint64 `json:"allowed"`
	Limited       []uint64 `json:"limited"`
	ShadowLimited []uint64 `json:"shadow_limited"`
	Errors        []uint64 `json:"error"`
	// Top is the keys most limited over the last minute.
	Top topReply `json:"top"`
}

// overview is the answer of GET /admin/v1/overview.
type overview struct {
	Time   time.Time      `json:"time"`
	Health *Health        `json:"health,omitempty"`
	Rules  []overviewRule `json:"rules"`
	// Domains lists the service's domains with their descriptors that
	// have decided something.
	Domains []overviewDomain `json:"domains,omitempty"`
}

type overviewDomain struct {
	Name        string   `json:"name"`
	Descriptors []string `json:"descriptors"`
}

// getOverview answers GET /admin/v1/overview: for each rule its decisions
// a second by outcome over the last RateSeconds (or ?seconds=), and its
// keys most limited over the last minute (?n=, default 5); the store's
// health; the service's domains.
func (a *api) getOverview(w http.ResponseWriter, r *http.Request, st State) {
	q, ok := parseTop(w, r, 5)
	if !ok {
		return
	}
	secs := RateSeconds
	if s := r.URL.Query().Get("seconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > topk.RateSeconds {
			problem.Write(w, http.StatusBadRequest, fmt.Sprintf("seconds %q: want a whole number from 1 to %d", s, topk.RateSeconds))
			return
		}
		secs = n
	}
	out := overview{Time: time.Now().UTC(), Rules: []overviewRule{}}
	if a.opts.Observed.Health != nil {
		h := a.opts.Observed.Health()
		out.Health = &h
	}
	var gateway []string
	if st.Limiter != nil {
		gateway = st.Limiter.Rules()
	}
	for _, name := range a.ruleNames(st) {
		k, ok := a.sketch(st, name)
		if !ok {
			continue
		}
		rates := k.Rates(secs)
		or := overviewRule{Name: name, Kind: "descriptor", Top: a.top(st, k, name, q),
			Allowed: make([]uint64, len(rates)), Limited: make([]uint64, len(rates)),
			ShadowLimited: make([]uint64, len(rates)), Errors: make([]uint64, len(rates))}
		if slices.Contains(gateway, name) {
			or.Kind = "rule"
		}
		if len(rates) > 0 {
			or.Start = rates[0].Time.Unix()
		}
		for i, rt := range rates {
			or.Allowed[i] = rt.Counts[topk.Allowed]
			or.Limited[i] = rt.Counts[topk.Limited]
			or.ShadowLimited[i] = rt.Counts[topk.ShadowLimited]
			or.Errors[i] = rt.Counts[topk.Error]
		}
		out.Rules = append(out.Rules, or)
	}
	type domainer interface{ Domains() []string }
	if ds, ok := serviceRules(st).(domainer); ok {
		for _, d := range ds.Domains() {
			od := overviewDomain{Name: d, Descriptors: []string{}}
			for _, or := range out.Rules {
				if or.Kind == "descriptor" && len(or.Name) > len(d) && or.Name[:len(d)+1] == d+"." {
					od.Descriptors = append(od.Descriptors, or.Name)
				}
			}
			out.Domains = append(out.Domains, od)
		}
	}
	reply(w, http.StatusOK, out)
}

// serviceRules returns the service's rule tree, or nil without a service.
func serviceRules(st State) any {
	if st.Service == nil {
		return nil
	}
	return st.Service.Rules()
}

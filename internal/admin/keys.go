package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/problem"
)

// keyBody names the keys to show or reset: a rule (or, without one, every
// rule whose key has as many parts) and the values of its key parts, or a
// request described as the gateway would receive it. Client, if set, adds
// that client's own limits (from its override) to a key form.
type keyBody struct {
	Rule    string       `json:"rule,omitempty"`
	Key     []string     `json:"key,omitempty"`
	Client  string       `json:"client,omitempty"`
	Request *requestBody `json:"request,omitempty"`
}

type requestBody struct {
	Method     string            `json:"method,omitempty"` // default GET
	Path       string            `json:"path"`             // with any query
	Host       string            `json:"host,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	RemoteAddr string            `json:"remote_addr"` // the client's address, as the gateway's peer
}

// limitState is one limit's state for one key.
type limitState struct {
	Rule    string     `json:"rule"`
	Tier    string     `json:"tier,omitempty"`
	Exempt  bool       `json:"exempt,omitempty"`
	Skipped bool       `json:"skipped,omitempty"`
	Shadow  bool       `json:"shadow,omitempty"` // counted, never blocked: a shadow rule, or a key its enforce leaves in shadow mode
	Limit   *limitJSON `json:"limit,omitempty"`
	// Concurrency is set for a concurrency rule's slots, whose State then
	// counts leases: used (in use), remaining (free), allowed (a slot is
	// free), retry_after_seconds (until the earliest lease expires by
	// itself, when none is free) and reset_after_seconds (until the last
	// one held does).
	Concurrency *concurrencyJSON `json:"concurrency,omitempty"`
	State       *stateJSON       `json:"state,omitempty"`
}

type concurrencyJSON struct {
	Limit int64  `json:"limit"`
	Lease string `json:"lease"`
}

type limitJSON struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Period    string `json:"period"` // a duration, or day, week, month or year
	Burst     int64  `json:"burst,omitempty"`
	// Calendar is a calendar quota's calendar, such as
	// "month anchor=15T09:00 zone=Europe/Berlin".
	Calendar string `json:"calendar,omitempty"`
}

// limitToJSON describes l.
func limitToJSON(l sluice.Limit) *limitJSON {
	j := &limitJSON{Algorithm: l.Algorithm.String(), Limit: l.Count, Period: l.Period.String(), Burst: l.Burst}
	if l.Calendar != nil {
		j.Period, j.Calendar = l.Calendar.Spec().Unit.String(), l.Calendar.String()
	}
	return j
}

type stateJSON struct {
	// Used is what the key has used of the limit's capacity (its burst
	// for buckets, its limit for windows): capacity minus Remaining.
	Used       int64     `json:"used"`
	Remaining  int64     `json:"remaining"`
	Allowed    bool      `json:"allowed"` // would one more request pass
	RetryAfter float64   `json:"retry_after_seconds"`
	ResetAfter float64   `json:"reset_after_seconds"`
	Reset      time.Time `json:"reset"`
	// PeriodStart and PeriodEnd bound a calendar quota's current period,
	// in its time zone: the usage counts from the start, and the quota
	// renews at the end.
	PeriodStart *time.Time `json:"period_start,omitempty"`
	PeriodEnd   *time.Time `json:"period_end,omitempty"`
}

func toJSON(ks httplimit.KeyStatus) limitState {
	s := limitState{Rule: ks.Rule, Tier: ks.Tier, Exempt: ks.Exempt, Skipped: ks.Skipped, Shadow: ks.Shadow}
	if c := ks.Concurrency; c != nil {
		d := ks.Decision
		s.Concurrency = &concurrencyJSON{Limit: c.Limit, Lease: c.Lease.String()}
		s.State = &stateJSON{Used: max(0, c.Limit-d.Remaining), Remaining: d.Remaining, Allowed: d.Allowed,
			RetryAfter: d.RetryAfter.Seconds(), ResetAfter: d.ResetAfter.Seconds(), Reset: d.ResetTime().UTC()}
		return s
	}
	if ks.Limit.Count == 0 {
		return s
	}
	s.Limit = limitToJSON(ks.Limit)
	s.State = limitStateJSON(ks.Limit, ks.Decision)
	return s
}

// limitStateJSON is the state d of a key under limit l: what it used of
// l's capacity (its burst for buckets, its limit for windows) and, for a
// calendar quota, the bounds of its current period.
func limitStateJSON(l sluice.Limit, d sluice.Decision) *stateJSON {
	capacity := l.Count
	if l.Algorithm.IsBucket() && l.Burst > 0 {
		capacity = l.Burst
	}
	st := &stateJSON{Used: max(0, capacity-d.Remaining), Remaining: d.Remaining, Allowed: d.Allowed,
		RetryAfter: d.RetryAfter.Seconds(), ResetAfter: d.ResetAfter.Seconds(), Reset: d.ResetTime().UTC()}
	if l.Calendar != nil {
		start, end := l.Calendar.Bounds(d.Time)
		st.PeriodStart, st.PeriodEnd = &start, &end
	}
	return st
}

// keys resolves a key form into (rule, key) pairs, or answers a problem.
func keys(w http.ResponseWriter, lim *httplimit.Limiter, b *keyBody) (rules, ks []string, ok bool) {
	names := []string{b.Rule}
	if b.Rule == "" {
		names = lim.Rules()
	}
	for _, name := range names {
		k, err := lim.RuleKey(name, b.Key)
		switch {
		case err == nil:
			rules, ks = append(rules, name), append(ks, k)
		case b.Rule == "":
			// Without a rule, the rules the values do not fit are not meant.
		case errors.Is(err, httplimit.ErrUnknownRule):
			problem.Write(w, http.StatusNotFound, fmt.Sprintf("no rule is named %q: the rules are %s", b.Rule, strings.Join(lim.Rules(), ", ")))
			return nil, nil, false
		default:
			problem.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), httplimit.ErrInvalidKey.Error()+": "))
			return nil, nil, false
		}
	}
	if len(rules) == 0 {
		problem.Write(w, http.StatusBadRequest, fmt.Sprintf("no rule is keyed by %d values", len(b.Key)))
		return nil, nil, false
	}
	return rules, ks, true
}

// request builds the http.Request a description stands for.
func request(rb *requestBody) (*http.Request, error) {
	if rb.Path == "" || rb.Path[0] != '/' {
		return nil, fmt.Errorf("request.path %q: want a path starting with /", rb.Path)
	}
	u, err := url.ParseRequestURI(rb.Path)
	if err != nil {
		return nil, fmt.Errorf("request.path %q: %v", rb.Path, err)
	}
	method := rb.Method
	if method == "" {
		method = http.MethodGet
	}
	if strings.ContainsAny(method, " \t\r\n/:") {
		return nil, fmt.Errorf("request.method %q is not an HTTP method", method)
	}
	remote, err := remoteAddr(rb.RemoteAddr)
	if err != nil {
		return nil, err
	}
	r := &http.Request{Method: method, URL: u, Host: rb.Host, Header: http.Header{}, RemoteAddr: remote, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	for k, v := range rb.Headers {
		r.Header.Set(k, v)
	}
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	}
	return r, nil
}

// remoteAddr checks a request's remote_addr, an IP address with or without
// a port (an IPv6 address with a port in brackets), and returns it as the
// gateway's peer address would be: host:port, port 0 when none is given.
func remoteAddr(s string) (string, error) {
	if s == "" {
		return "", errors.New("request.remote_addr: required: the address of the client (or of the proxy in front of it)")
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), nil
	}
	host := s
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		host = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a, 0).String(), nil
	}
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return "", fmt.Errorf("request.remote_addr %q: want an IP address, optionally with a port from 0 to 65535 (203.0.113.9, 203.0.113.9:443, 2001:db8::1 or [2001:db8::1]:443)", s)
}

// parse reads and checks a key body; it answers the problem itself.
func parse(w http.ResponseWriter, r *http.Request) (*keyBody, *http.Request, bool) {
	var b keyBody
	if !decode(w, r, &b) {
		return nil, nil, false
	}
	switch {
	case b.Request != nil && b.Key != nil:
		problem.Write(w, http.StatusBadRequest, "give key or request, not both")
		return nil, nil, false
	case b.Request == nil && b.Key == nil:
		problem.Write(w, http.StatusBadRequest, `give key (the values of a rule's key parts, such as {"rule": "login", "key": ["203.0.113.9"]}) or request (method, path, host, headers, remote_addr)`)
		return nil, nil, false
	case b.Request != nil && b.Client != "":
		problem.Write(w, http.StatusBadRequest, "client goes with key; a request names its client itself")
		return nil, nil, false
	}
	if b.Request == nil {
		return &b, nil, true
	}
	req, err := request(b.Request)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return nil, nil, false
	}
	return &b, req, true
}

func (a *api) showKey(w http.ResponseWriter, r *http.Request, st State) {
	b, req, ok := parse(w, r)
	if !ok {
		return
	}
	var out []limitState
	if req != nil {
		sts, err := st.Limiter.PeekRequest(r.Context(), req)
		if err != nil {
			problem.Write(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		for _, s := range sts {
			if b.Rule == "" || s.Rule == b.Rule {
				out = append(out, toJSON(s))
			}
		}
	} else {
		rules, ks, ok := keys(w, st.Limiter, b)
		if !ok {
			return
		}
		ov := a.override(b.Client)
		for i, rule := range rules {
			sts, err := st.Limiter.PeekKey(r.Context(), rule, ks[i], ov)
			if err != nil {
				problem.Write(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			for _, s := range sts {
				out = append(out, toJSON(s))
			}
		}
	}
	reply(w, http.StatusOK, struct {
		Limits []limitState `json:"limits"`
	}{out})
}

func (a *api) override(client string) *httplimit.ClientOverride {
	if client == "" {
		return nil
	}
	return a.opts.Overrides.Override(client)
}

func (a *api) resetKey(w http.ResponseWriter, r *http.Request, st State) {
	b, req, ok := parse(w, r)
	if !ok {
		return
	}
	var done []string
	if req != nil {
		var err error
		if done, err = st.Limiter.ResetRequest(r.Context(), req, b.Rule); err != nil {
			problem.Write(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	} else {
		rules, ks, ok := keys(w, st.Limiter, b)
		if !ok {
			return
		}
		ov := a.override(b.Client)
		for i, rule := range rules {
			if err := st.Limiter.ResetKey(r.Context(), rule, ks[i], ov); err != nil {
				problem.Write(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			done = append(done, rule)
		}
	}
	done = slices.Compact(done)
	a.log.Info("admin API: key reset", "rules", done)
	reply(w, http.StatusOK, struct {
		Reset []string `json:"reset"`
	}{done})
}

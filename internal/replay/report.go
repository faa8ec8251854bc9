package replay

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"
)

// Report is what a replay found. Its JSON form is the command's --json
// output.
type Report struct {
	// Config and Logs name what was replayed; Format is the logs' format.
	Config string   `json:"config"`
	Logs   []string `json:"logs"`
	Format string   `json:"format"`
	// Lines is every line read; Unparsed those that are no request
	// replay can rebuild, counted by reason in UnparsedReasons and the
	// first MaxListedLines of them listed in UnparsedLines.
	Lines           int64     `json:"lines"`
	Unparsed        int64     `json:"unparsed"`
	UnparsedReasons []Reason  `json:"unparsed_reasons,omitempty"`
	UnparsedLines   []LineRef `json:"unparsed_lines,omitempty"`
	// ReadErrors are the logs that broke off (a truncated gzip stream):
	// each is replayed up to the break.
	ReadErrors []string `json:"read_errors,omitempty"`
	// Requests is every request decided: Lines less Unparsed.
	Requests int64 `json:"requests"`
	// Late counts the requests logged more than ToleranceSeconds before
	// one already decided; each was decided at the latest time reached.
	// The first MaxListedLines are listed in LateLines.
	Late             int64     `json:"late"`
	LateLines        []LineRef `json:"late_lines,omitempty"`
	ToleranceSeconds float64   `json:"tolerance_seconds"`
	// From and To are the times of the first and last requests decided;
	// absent when none was.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Limited, Delayed and Denied count the requests answered 429, held
	// for their turn, and refused 403 for a deny list; Unmatched those no
	// rule matched.
	Limited   int64 `json:"limited"`
	Delayed   int64 `json:"delayed"`
	Denied    int64 `json:"denied"`
	Unmatched int64 `json:"unmatched"`
	// Rules are the configuration's rules, in order.
	Rules []RuleReport `json:"rules"`
	// Notes say what a replay cannot know from logs, for this
	// configuration.
	Notes []string `json:"notes,omitempty"`
	// Against compares the configuration with Options.Against.
	Against *Comparison `json:"against,omitempty"`
}

// Reason counts the unparsed lines of one reason.
type Reason struct {
	Reason string `json:"reason"`
	Lines  int64  `json:"lines"`
}

// LineRef is one line of a log, and why it is listed.
type LineRef struct {
	Log    string `json:"log"`
	Line   int64  `json:"line"`
	Reason string `json:"reason"`
}

// RuleReport is one rule's part in a replay. Matched is Admitted +
// Limited + Skipped; Delayed requests are admitted. For a shadow or soft
// rule, Limited counts the requests it would have limited (or marked):
// such a rule never refuses.
type RuleReport struct {
	Rule     string `json:"rule"`
	Action   string `json:"action"`
	Matched  int64  `json:"matched"`
	Admitted int64  `json:"admitted"`
	Limited  int64  `json:"limited"`
	Delayed  int64  `json:"delayed"`
	// Skipped counts matched requests the rule did not decide: a key part
	// was missing and the rule skips such requests, or another rule had
	// refused the request.
	Skipped int64 `json:"skipped"`
	// MaxDelaySeconds is the longest a delayed request waited its turn.
	MaxDelaySeconds float64 `json:"max_delay_seconds"`
	// Clients counts the rule's distinct keys; ClientsLimited those
	// limited at least once.
	Clients        int64       `json:"clients"`
	ClientsLimited int64       `json:"clients_limited"`
	Top            []TopClient `json:"top"`
	// PerMinute counts the requests matched and limited in each minute
	// with any, in time order.
	PerMinute []Minute `json:"per_minute"`
	// Suggest is the rule's suggestion, with Options.Suggest, for a rule
	// with a limit over a fixed period.
	Suggest *Suggestion `json:"suggest,omitempty"`
}

// TopClient is a client that a rule limited, by its key in readable form
// (see httplimit.Limiter.KeyString).
type TopClient struct {
	Key     string `json:"key"`
	Limited int64  `json:"limited"`
	// Requests is every request of the key the rule matched.
	Requests int64 `json:"requests"`
}

// Minute is one minute of a rule's traffic.
type Minute struct {
	Minute  time.Time `json:"minute"`
	Matched int64     `json:"matched"`
	Limited int64     `json:"limited"`
}

// Suggestion is the evidence for a rule's limit: each client's (key's)
// peak, the most requests it sent in any window of the rule's period
// (counted in tenths of the period, so a peak may miss up to a tenth's
// worth at a window's edges), and its percentiles across clients.
type Suggestion struct {
	PeriodSeconds float64 `json:"period_seconds"`
	Clients       int64   `json:"clients"`
	P50           int64   `json:"p50"`
	P90           int64   `json:"p90"`
	P99           int64   `json:"p99"`
	P999          int64   `json:"p99_9"`
	Max           int64   `json:"max"`
	// MaxClientsLimited is the share of clients the suggested limit may
	// limit; Limit is the smallest limit per period that limits no more
	// (the clients whose peak exceeds it), and ClientsOverLimit how many
	// it limits.
	MaxClientsLimited float64 `json:"max_clients_limited"`
	Limit             int64   `json:"limit"`
	ClientsOverLimit  int64   `json:"clients_over_limit"`
	// CurrentLimit is the rule's own limit per period, and
	// ClientsOverCurrent the clients whose peak exceeds it.
	CurrentLimit       int64 `json:"current_limit"`
	ClientsOverCurrent int64 `json:"clients_over_current"`
}

// Comparison compares the clients the replayed configuration (the new
// one) limits with those Options.Against (the old one) limits. A client is
// an address as each configuration's client_ip finds it, for whole
// requests answered 429; and a key, for the rules both have by name.
type Comparison struct {
	Config string `json:"config"`
	// Limited counts the requests the old configuration answered 429.
	Limited int64 `json:"limited"`
	// NewlyLimited are the clients the new configuration limits and the
	// old never did, with the new one's count; NoLongerLimited the
	// reverse, with the old one's. The lists hold the Top clients; the
	// counts are whole.
	NewlyLimited         []ClientCount    `json:"newly_limited"`
	NewlyLimitedCount    int64            `json:"newly_limited_count"`
	NoLongerLimited      []ClientCount    `json:"no_longer_limited"`
	NoLongerLimitedCount int64            `json:"no_longer_limited_count"`
	Rules                []RuleComparison `json:"rules"`
}

// ClientCount is a client and its limited requests.
type ClientCount struct {
	Client  string `json:"client"`
	Limited int64  `json:"limited"`
}

// RuleComparison compares one rule's limited keys. In says where the
// rule is: "both", "new" or "old"; a rule in one configuration only has
// every limited key in one list.
type RuleComparison struct {
	Rule                 string        `json:"rule"`
	In                   string        `json:"in"`
	NewlyLimited         []ClientCount `json:"newly_limited"`
	NewlyLimitedCount    int64         `json:"newly_limited_count"`
	NoLongerLimited      []ClientCount `json:"no_longer_limited"`
	NoLongerLimitedCount int64         `json:"no_longer_limited_count"`
}

// finish turns the run's counts into its report.
func (r *run) finish() {
	r.cur.st.flush()
	if r.old != nil {
		r.old.st.flush()
	}
	rep := r.rep
	if r.started {
		rep.To = time.Unix(0, r.now).UTC()
	}
	for why, n := range r.reasons {
		rep.UnparsedReasons = append(rep.UnparsedReasons, Reason{Reason: string(why), Lines: n})
	}
	slices.SortFunc(rep.UnparsedReasons, func(a, b Reason) int {
		return cmp.Or(cmp.Compare(b.Lines, a.Lines), cmp.Compare(a.Reason, b.Reason))
	})
	st := r.cur.st
	rep.Limited, rep.Delayed, rep.Denied, rep.Unmatched = st.limited, st.delayed, st.denied, st.unmatched
	rep.Rules = make([]RuleReport, 0, len(st.rules))
	for _, rs := range st.rules {
		rep.Rules = append(rep.Rules, r.ruleReport(st, rs))
	}
	rep.Notes = notes(r.opts.Config, r.cur.carried)
	if st := r.cur.store; st != nil && st.Evicted() > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the store forgot the state of %d limits still in use to stay within store.max_keys (%d): clients were admitted more than the limits allow, and which ones can differ between replays; these logs need a larger store.max_keys, and so would sluice serve for this traffic",
			st.Evicted(), st.MaxKeys()))
	}
	if r.old != nil {
		rep.Against = r.compare()
	}
}

func (r *run) ruleReport(st *stats, rs *ruleStats) RuleReport {
	rr := RuleReport{Rule: rs.name, Action: rs.action, Matched: rs.matched, Admitted: rs.admitted, Limited: rs.limited,
		Delayed: rs.delayed, Skipped: rs.skipped, MaxDelaySeconds: rs.maxDelay.Seconds(),
		Clients: rs.clients, PerMinute: rs.minutes, Top: []TopClient{}}
	clients := st.limitedOf(rs)
	if rr.PerMinute == nil {
		rr.PerMinute = []Minute{}
	}
	limited := make([]string, 0, len(clients))
	for k := range clients {
		limited = append(limited, k)
	}
	rr.ClientsLimited = int64(len(limited))
	slices.SortFunc(limited, func(a, b string) int {
		return cmp.Or(cmp.Compare(clients[b].limited, clients[a].limited), cmp.Compare(a, b))
	})
	for _, k := range limited[:min(len(limited), r.opts.Top)] {
		c := clients[k]
		rr.Top = append(rr.Top, TopClient{Key: keyString(st, rs.name, k), Limited: c.limited, Requests: c.requests})
	}
	if r.opts.Suggest && rs.period > 0 && rs.clients > 0 {
		rr.Suggest = suggest(st, rs, st.clientsOf(rs), r.opts.MaxClientsLimited)
	}
	return rr
}

// keyString is a rule's key in readable form, or as it is.
func keyString(st *stats, rule, key string) string {
	if s, err := st.lim.KeyString(rule, key); err == nil {
		return s
	}
	return key
}

// suggest computes a rule's suggestion from its clients' peaks.
func suggest(st *stats, rs *ruleStats, clients map[string]*clientStats, share float64) *Suggestion {
	peaks := make([]int64, 0, len(clients))
	for _, c := range clients {
		if p, ok := st.peakOf(c); ok {
			peaks = append(peaks, int64(p))
		}
	}
	slices.Sort(peaks)
	n := len(peaks)
	if n == 0 {
		return nil
	}
	at := func(q float64) int64 {
		i := int(math.Ceil(q*float64(n))) - 1
		return peaks[max(0, min(i, n-1))]
	}
	s := &Suggestion{PeriodSeconds: rs.period.Seconds(), Clients: int64(n), P50: at(0.5), P90: at(0.9), P99: at(0.99),
		P999: at(0.999), Max: peaks[n-1], MaxClientsLimited: share}
	// At most k clients may be over the limit: the limit is the (k+1)th
	// largest peak, which exactly k clients' peaks can exceed.
	k := int(math.Floor(share*float64(n) + 1e-9))
	if k >= n {
		s.Limit = 0
	} else {
		s.Limit = peaks[n-1-k]
	}
	s.ClientsOverLimit = over(peaks, s.Limit)
	if rule, ok := st.lim.Rule(rs.name); ok {
		s.CurrentLimit = rule.Limit.Count
		s.ClientsOverCurrent = over(peaks, s.CurrentLimit)
	}
	return s
}

// over counts the sorted peaks above limit.
func over(peaks []int64, limit int64) int64 {
	i, _ := slices.BinarySearch(peaks, limit+1)
	return int64(len(peaks) - i)
}

// compare compares the new configuration's limited clients with the old
// one's.
func (r *run) compare() *Comparison {
	cur, old := r.cur.st, r.old.st
	c := &Comparison{Config: r.opts.AgainstName, Limited: old.limited}
	c.NewlyLimited, c.NewlyLimitedCount = onlyIn(cur.limitedClients, old.limitedClients, r.opts.Top, netip.Addr.String)
	c.NoLongerLimited, c.NoLongerLimitedCount = onlyIn(old.limitedClients, cur.limitedClients, r.opts.Top, netip.Addr.String)
	keys := func(st *stats, rule string) map[string]int64 {
		m := map[string]int64{}
		if rs := st.byName[rule]; rs != nil {
			for k, cs := range st.limitedOf(rs) {
				m[k] = cs.limited
			}
		}
		return m
	}
	add := func(rule, in string) {
		nk, ok := keys(cur, rule), keys(old, rule)
		rc := RuleComparison{Rule: rule, In: in}
		rc.NewlyLimited, rc.NewlyLimitedCount = onlyIn(nk, ok, r.opts.Top, func(k string) string { return keyString(cur, rule, k) })
		rc.NoLongerLimited, rc.NoLongerLimitedCount = onlyIn(ok, nk, r.opts.Top, func(k string) string { return keyString(old, rule, k) })
		c.Rules = append(c.Rules, rc)
	}
	for _, rs := range cur.rules {
		if old.byName[rs.name] != nil {
			add(rs.name, "both")
		} else {
			add(rs.name, "new")
		}
	}
	for _, rs := range old.rules {
		if cur.byName[rs.name] == nil {
			add(rs.name, "old")
		}
	}
	return c
}

// onlyIn returns the top clients of a that b lacks, by count, and how
// many there are.
func onlyIn[K comparable](a, b map[K]int64, top int, name func(K) string) ([]ClientCount, int64) {
	type kc struct {
		k K
		n int64
		s string
	}
	var only []kc
	for k, n := range a {
		if _, ok := b[k]; !ok {
			only = append(only, kc{k: k, n: n})
		}
	}
	for i := range only {
		only[i].s = name(only[i].k)
	}
	slices.SortFunc(only, func(x, y kc) int { return cmp.Or(cmp.Compare(y.n, x.n), cmp.Compare(x.s, y.s)) })
	out := []ClientCount{}
	for _, o := range only[:min(len(only), top)] {
		out = append(out, ClientCount{Client: o.s, Limited: o.n})
	}
	return out, int64(len(only))
}

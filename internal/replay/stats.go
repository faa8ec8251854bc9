package replay

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

// stats is what one configuration's decisions add up to. Its memory grows
// with the distinct keys of each rule and the minutes of the logs, never
// with their lines.
type stats struct {
	suggest bool
	lim     *httplimit.Limiter
	rules   []*ruleStats
	byName  map[string]*ruleStats

	// keys holds every rule's keys: rules keyed alike (by ip, say) share
	// one entry, found once per request.
	keys map[string]*keyStats

	requests, limited, delayed, denied, unmatched int64
	// limitedClients counts the limited requests of each client address
	// (as the configuration's client_ip finds it).
	limitedClients map[netip.Addr]int64
}

// ruleStats is one rule's part.
type ruleStats struct {
	idx                                          int32
	name, action                                 string
	period                                       time.Duration // of the rule's own limit; 0 for none
	matched, admitted, limited, delayed, skipped int64
	clients                                      int64
	maxDelay                                     time.Duration
	minutes                                      []Minute // in time order: the clock never goes back
}

// keyStats is one key's part in each rule that used it: the first few
// rules in the entry itself, so that a lookup reads one object.
type keyStats struct {
	n     int
	first [3]clientStats
	more  []clientStats
}

// at returns the key's i-th rule part.
func (k *keyStats) at(i int) *clientStats {
	if i < len(k.first) {
		return &k.first[i]
	}
	return &k.more[i-len(k.first)]
}

type clientStats struct {
	rule              int32
	requests, limited int64
	peak              *peakCounter // with suggestions
}

// of returns the key's part in rule rs, adding it if new.
func (k *keyStats) of(rs *ruleStats, suggest bool) *clientStats {
	for i := range k.n {
		if c := k.at(i); c.rule == rs.idx {
			return c
		}
	}
	c := clientStats{rule: rs.idx}
	if suggest && rs.period > 0 {
		c.peak = newPeakCounter(rs.period)
	}
	rs.clients++
	if k.n < len(k.first) {
		k.first[k.n] = c
	} else {
		k.more = append(k.more, c)
	}
	k.n++
	return k.at(k.n - 1)
}

func newStats(suggest bool) *stats {
	return &stats{suggest: suggest, byName: map[string]*ruleStats{}, keys: map[string]*keyStats{}, limitedClients: map[netip.Addr]int64{}}
}

// init lists the limiter's rules, in order.
func (s *stats) init(lim *httplimit.Limiter) {
	s.lim = lim
	for i, name := range lim.Rules() {
		rule, _ := lim.Rule(name)
		rs := &ruleStats{idx: int32(i), name: name, action: rule.Action.String()}
		if rule.Limit.Calendar == nil {
			rs.period = rule.Limit.Period
		}
		s.rules = append(s.rules, rs)
		s.byName[name] = rs
	}
}

// observe adds one request's event, decided at now (ns).
func (s *stats) observe(e *httplimit.Event, now int64) {
	minute := now / int64(time.Minute) * int64(time.Minute)
	var (
		prevKey string
		prev    *keyStats
	)
	next := 0 // events come in the rules' order, naming them by the same strings
	for i := range e.Rules {
		re := &e.Rules[i]
		k := next
		for k < len(s.rules) && !sameString(s.rules[k].name, re.Rule) {
			k++
		}
		var rs *ruleStats
		if k < len(s.rules) {
			rs = s.rules[k]
		} else if rs = s.byName[re.Rule]; rs == nil {
			continue
		}
		next = int(rs.idx) + 1
		rs.matched++
		limited := false
		switch re.Outcome {
		case httplimit.OutcomeLimited, httplimit.OutcomeShadowLimited, httplimit.OutcomeSoftLimited:
			rs.limited++
			limited = true
		case httplimit.OutcomeDelayed:
			rs.admitted++
			rs.delayed++
			rs.maxDelay = max(rs.maxDelay, re.Decision.Delay)
		case httplimit.OutcomeAllowed, httplimit.OutcomeNotCounted, httplimit.OutcomeExempt, httplimit.OutcomeAllowListed:
			rs.admitted++
		default: // skipped (a key part missing, or refused by another rule first), error, canceled
			rs.skipped++
		}
		if n := len(rs.minutes); n == 0 || rs.minutes[n-1].Minute.UnixNano() != minute {
			rs.minutes = append(rs.minutes, Minute{Minute: time.Unix(0, minute).UTC()})
		}
		m := &rs.minutes[len(rs.minutes)-1]
		m.Matched++
		if limited {
			m.Limited++
		}
		if re.Key == "" {
			continue
		}
		ks := prev
		if ks == nil || re.Key != prevKey {
			if ks = s.keys[re.Key]; ks == nil {
				ks = &keyStats{}
				s.keys[re.Key] = ks
			}
			prev, prevKey = ks, re.Key
		}
		c := ks.of(rs, s.suggest)
		c.requests++
		if limited {
			c.limited++
		}
		if c.peak != nil {
			c.peak.add(now)
		}
	}
}

// clientsOf returns rule rs's part of every key that has one.
func (s *stats) clientsOf(rs *ruleStats) map[string]*clientStats {
	out := make(map[string]*clientStats, rs.clients)
	for k, ks := range s.keys {
		for i := range ks.n {
			if c := ks.at(i); c.rule == rs.idx {
				out[k] = c
			}
		}
	}
	return out
}

// request adds the request's outcome; noOutcome when no rule matched it.
func (s *stats) request(o httplimit.Outcome, r *http.Request, ip *clientip.Resolver) {
	s.requests++
	switch o {
	case noOutcome:
		s.unmatched++
	case httplimit.OutcomeLimited:
		s.limited++
		if a, err := ip.Addr(r); err == nil {
			s.limitedClients[a]++
		}
	case httplimit.OutcomeDelayed:
		s.delayed++
	case httplimit.OutcomeDenied:
		s.denied++
	}
}

// peakCounter finds the most requests of one client in any window of one
// period, to a tenth of the period: it counts requests in tenths and sums
// the last ten.
type peakCounter struct {
	width   int64 // ns, a tenth of the period
	cur     int64 // the current tenth, since the epoch
	buckets [peakBuckets]uint32
	sum     uint32
	peak    uint32
}

const peakBuckets = 10

func newPeakCounter(period time.Duration) *peakCounter {
	return &peakCounter{width: max(int64(period)/peakBuckets, 1), cur: -1}
}

// add counts a request at t (ns); times never go back.
func (p *peakCounter) add(t int64) {
	b := t / p.width
	if b != p.cur {
		if p.cur < 0 || b-p.cur >= peakBuckets {
			p.buckets, p.sum = [peakBuckets]uint32{}, 0
		} else {
			for i := p.cur + 1; i <= b; i++ {
				k := i % peakBuckets
				p.sum -= p.buckets[k]
				p.buckets[k] = 0
			}
		}
		p.cur = b
	}
	p.buckets[b%peakBuckets]++
	p.sum++
	p.peak = max(p.peak, p.sum)
}

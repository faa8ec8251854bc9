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
	last    *ruleStats // the rule of the last event, as rules often repeat

	requests, limited, delayed, denied, unmatched int64
	// limitedClients counts the limited requests of each client address
	// (as the configuration's client_ip finds it).
	limitedClients map[netip.Addr]int64
}

// ruleStats is one rule's part.
type ruleStats struct {
	name, action                                 string
	period                                       time.Duration // of the rule's own limit; 0 for none
	matched, admitted, limited, delayed, skipped int64
	maxDelay                                     time.Duration
	clients                                      map[string]*clientStats
	minutes                                      []Minute // in time order: the clock never goes back
}

type clientStats struct {
	requests, limited int64
	peak              *peakCounter // with suggestions
}

func newStats(suggest bool) *stats {
	return &stats{suggest: suggest, byName: map[string]*ruleStats{}, limitedClients: map[netip.Addr]int64{}}
}

// init lists the limiter's rules, in order.
func (s *stats) init(lim *httplimit.Limiter) {
	s.lim = lim
	for _, name := range lim.Rules() {
		rule, _ := lim.Rule(name)
		rs := &ruleStats{name: name, action: rule.Action.String(), clients: map[string]*clientStats{}}
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
	for i := range e.Rules {
		re := &e.Rules[i]
		rs := s.last
		if rs == nil || rs.name != re.Rule {
			if rs = s.byName[re.Rule]; rs == nil {
				continue
			}
			s.last = rs
		}
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
		c := rs.clients[re.Key]
		if c == nil {
			c = &clientStats{}
			if s.suggest && rs.period > 0 {
				c.peak = newPeakCounter(rs.period)
			}
			rs.clients[re.Key] = c
		}
		c.requests++
		if limited {
			c.limited++
		}
		if c.peak != nil {
			c.peak.add(now)
		}
	}
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

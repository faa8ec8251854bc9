package replay

import (
	"hash/maphash"
	"net/http"
	"net/netip"
	"time"
	"unsafe"

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
	// one record.
	keys keyTable
	// batch holds the rules' parts whose keys' counts are yet to be
	// found (see flush); tags and recs are flush's scratch space, and
	// sink what its reads ahead add up to.
	batch []counted
	tags  []uint32
	recs  []int
	sink  uint32

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
	minute                                       int64    // the last minute's start (ns), when minutes has one
}

type clientStats struct {
	rule              int32
	peak              int32 // with suggestions: 1 + its index in keyTable.peaks; 0 for none
	requests, limited int64
}

func newStats(suggest bool) *stats {
	return &stats{suggest: suggest, byName: map[string]*ruleStats{}, keys: newKeyTable(), limitedClients: map[netip.Addr]int64{}}
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
	next := 0 // events come in the rules' order, naming them by the same strings
	first := len(s.batch)
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
		if len(rs.minutes) == 0 || rs.minute != minute {
			rs.minutes = append(rs.minutes, Minute{Minute: time.Unix(0, minute).UTC()})
			rs.minute = minute
		}
		m := &rs.minutes[len(rs.minutes)-1]
		m.Matched++
		if limited {
			m.Limited++
		}
		if re.Key != "" {
			// Rules keyed alike (by ip, say) share the key's record: it
			// is found once per request.
			same := len(s.batch) > first && s.batch[len(s.batch)-1].key == re.Key
			s.batch = append(s.batch, counted{key: re.Key, rs: rs, now: now, limited: limited, same: same})
		}
	}
	if len(s.batch) >= countBatch {
		s.flush()
	}
}

// counted is one rule's part in a request, to be added to its key's
// counts.
type counted struct {
	key     string
	rs      *ruleStats
	now     int64
	limited bool
	same    bool // the key of the part before, of the same request
}

// countBatch is how many rules' parts are added to their keys' counts at
// once.
const countBatch = 64

// flush adds the batch's parts to their keys' counts, in order. With
// 100,000 keys the index and the records outgrow the processor's caches,
// and finding one key is two cache misses, one after the other: the
// index's entry, then the record. So the batch is done in three passes:
// the first reads each key's home entry of the index, the second each
// key's record as the index names it, and the third finds and counts. The
// reads of a pass do not depend on one another, so the processor waits
// for their misses together rather than one by one, and the third pass
// finds everything in the cache. The counts are those of counting each
// part as it came.
func (s *stats) flush() {
	t, b := &s.keys, s.batch
	s.tags = s.tags[:0]
	sink := s.sink
	for i := range b {
		if b[i].same {
			s.tags = append(s.tags, s.tags[i-1])
			continue
		}
		tag := t.tag(b[i].key)
		s.tags = append(s.tags, tag)
		sink += t.index[t.home(tag)].rec
	}
	for i := range b {
		if b[i].same {
			continue
		}
		if r := t.candidate(s.tags[i]); r >= 0 {
			ks := &t.recs[r]
			sink += uint32(ks.klen) + uint32(ks.first[2].rule)
		}
	}
	s.recs = s.recs[:0]
	for i := range b {
		if b[i].same {
			s.recs = append(s.recs, s.recs[i-1])
			continue
		}
		s.recs = append(s.recs, t.findTagged(b[i].key, s.tags[i]))
	}
	for i := range b {
		p := &b[i]
		// Records move when one is added: each is found by its number.
		c := t.of(&t.recs[s.recs[i]], p.rs, s.suggest)
		c.requests++
		if p.limited {
			c.limited++
		}
		if c.peak != 0 {
			t.peaks[c.peak-1].add(p.now)
		}
	}
	s.sink = sink
	clear(b)
	s.batch = b[:0]
}

// clientsOf returns rule rs's part of every key that has one. The parts
// stay valid while no key is added.
func (s *stats) clientsOf(rs *ruleStats) map[string]*clientStats {
	s.flush()
	out := make(map[string]*clientStats, rs.clients)
	t := &s.keys
	for i := range t.recs {
		ks := &t.recs[i]
		for j := range int(ks.n) {
			if c := t.at(ks, j); c.rule == rs.idx {
				out[t.key(ks)] = c
			}
		}
	}
	return out
}

// limitedOf returns rule rs's part of every key it limited at least once.
// The parts stay valid while no key is added.
func (s *stats) limitedOf(rs *ruleStats) map[string]*clientStats {
	s.flush()
	out := make(map[string]*clientStats)
	t := &s.keys
	for i := range t.recs {
		ks := &t.recs[i]
		for j := range int(ks.n) {
			if c := t.at(ks, j); c.rule == rs.idx && c.limited > 0 {
				out[t.key(ks)] = c
			}
		}
	}
	return out
}

// peakOf returns c's peak, with suggestions.
func (s *stats) peakOf(c *clientStats) (uint32, bool) {
	if c.peak == 0 {
		return 0, false
	}
	return s.keys.peaks[c.peak-1].peak, true
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

// keyTable holds each key's part in each rule that used it. With 100,000
// clients the counts outgrow the processor's caches, and a map of pointers
// to each key's counts took three or four cache misses per request (the
// map's group, the key's bytes, the counts): here an index of 8-byte
// entries, searched with linear probing, leads to the key's record of 128
// bytes, two neighbouring cache lines that hold the key (up to inlineKey
// bytes of it) and its first few parts. Counting a request reads one line
// of the index and one record. Neither holds a pointer for the garbage
// collector to scan.
type keyTable struct {
	index []keyIndex // at most 3/4 used
	recs  []keySlot  // in the order the keys came
	seed  maphash.Seed
	long  []string        // keys longer than inlineKey, by keySlot.long
	more  [][]clientStats // the parts beyond a record's own, by keySlot.more
	peaks []peakCounter   // with suggestions, by clientStats.peak
}

// keyIndex is an entry of the index: the top 32 bits of a key's hash,
// which also choose its home entry, and its record.
type keyIndex struct {
	tag uint32
	rec uint32 // 1 + the key's index in recs; 0 marks an empty entry
}

// inlineKey is the longest key a record holds itself: every ip key (an
// IPv4 address, or an IPv6 prefix and its tag) and many a composite one.
const inlineKey = 45

// keySlot is one key's record: 128 bytes, a multiple of the cache line.
type keySlot struct {
	// long is 1 + the key's index in keyTable.long for a key longer than
	// inlineKey, 0 for a key kept in key; more is 1 + the index of the
	// key's further parts in keyTable.more, 0 while it has none.
	long, more int32
	n          uint16 // parts in use
	klen       uint8  // the key's length, when inline
	key        [inlineKey]byte
	first      [3]clientStats
}

// The record is 128 bytes: more would take a third cache line.
var _ [0]struct{} = [unsafe.Sizeof(keySlot{}) - 128]struct{}{}

func newKeyTable() keyTable {
	return keyTable{seed: maphash.MakeSeed(), index: make([]keyIndex, 1<<10)}
}

// home returns the entry of the index at which the probe for a key of the
// given tag starts: the tag scaled to the index's size.
func (t *keyTable) home(tag uint32) int {
	return int(uint64(tag) * uint64(len(t.index)) >> 32)
}

// tag returns key's tag: the top 32 bits of its hash.
func (t *keyTable) tag(key string) uint32 {
	return uint32(maphash.String(t.seed, key) >> 32)
}

// candidate returns the number of the first record whose entry has the
// given tag, reading only the index, or -1.
func (t *keyTable) candidate(tag uint32) int {
	for i := t.home(tag); ; i++ {
		if i == len(t.index) {
			i = 0
		}
		switch e := t.index[i]; {
		case e.rec == 0:
			return -1
		case e.tag == tag:
			return int(e.rec - 1)
		}
	}
}

// findTagged returns the number of key's record, adding it with no parts
// if new; tag is key's tag.
func (t *keyTable) findTagged(key string, tag uint32) int {
	if (len(t.recs)+1)*4 > len(t.index)*3 {
		t.resize(len(t.index) + len(t.index)/2)
	}
	for i := t.home(tag); ; i++ {
		if i == len(t.index) {
			i = 0
		}
		e := t.index[i]
		if e.rec == 0 {
			t.recs = append(t.recs, keySlot{})
			ks := &t.recs[len(t.recs)-1]
			if len(key) <= inlineKey {
				ks.klen = uint8(copy(ks.key[:], key))
			} else {
				t.long = append(t.long, key)
				ks.long = int32(len(t.long))
			}
			t.index[i] = keyIndex{tag: tag, rec: uint32(len(t.recs))}
			return len(t.recs) - 1
		}
		if e.tag == tag && t.is(&t.recs[e.rec-1], key) {
			return int(e.rec - 1)
		}
	}
}

// is reports whether ks holds key.
func (t *keyTable) is(ks *keySlot, key string) bool {
	if ks.long != 0 {
		return t.long[ks.long-1] == key
	}
	return string(ks.key[:ks.klen]) == key
}

// key returns ks's key.
func (t *keyTable) key(ks *keySlot) string {
	if ks.long != 0 {
		return t.long[ks.long-1]
	}
	return string(ks.key[:ks.klen])
}

// resize moves the index's entries into an index of n.
func (t *keyTable) resize(n int) {
	old := t.index
	t.index = make([]keyIndex, n)
	for _, e := range old {
		if e.rec == 0 {
			continue
		}
		j := t.home(e.tag)
		for t.index[j].rec != 0 {
			if j++; j == n {
				j = 0
			}
		}
		t.index[j] = e
	}
}

// at returns the key's i-th rule part.
func (t *keyTable) at(ks *keySlot, i int) *clientStats {
	if i < len(ks.first) {
		return &ks.first[i]
	}
	return &t.more[ks.more-1][i-len(ks.first)]
}

// of returns the key's part in rule rs, adding it if new.
func (t *keyTable) of(ks *keySlot, rs *ruleStats, suggest bool) *clientStats {
	for i := range int(ks.n) {
		if c := t.at(ks, i); c.rule == rs.idx {
			return c
		}
	}
	c := clientStats{rule: rs.idx}
	if suggest && rs.period > 0 {
		t.peaks = append(t.peaks, *newPeakCounter(rs.period))
		c.peak = int32(len(t.peaks))
	}
	rs.clients++
	switch {
	case int(ks.n) < len(ks.first):
		ks.first[ks.n] = c
	case ks.more == 0:
		t.more = append(t.more, []clientStats{c})
		ks.more = int32(len(t.more))
	default:
		t.more[ks.more-1] = append(t.more[ks.more-1], c)
	}
	ks.n++
	return t.at(ks, int(ks.n)-1)
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

// Package topk finds the heavy hitters of a rule: the keys with the most
// requests, and with the most refusals, over the last minute and the last
// hour, in memory bounded per rule, at a cost on the decision path of a
// hash, a lock and two or three array updates, with no allocation.
//
// # The sketch, and why
//
// Each rule has a Sketch, which keeps windowed Space-Saving summaries
// (Metwally, Agrawal and El Abbadi, 2005): one for the rule's decisions and
// one for its refusals. A Space-Saving summary of k counters over a stream
// of N keys keeps, for each key it monitors, a count c and an error e such
// that the key occurred between c-e and c times; a key not monitored
// occurred at most m times, m being the smallest count (0 while a counter
// is free). Its counts add up to N, so m <= N/k, and every key that
// occurred more than N/k times is monitored. It answers "which keys are
// the most frequent" directly, with a bound on each answer, which is what
// an operator asks of a rule whose refusals went up. A Count-Min sketch
// answers only "how often did this key occur", for a key one already
// knows, and needs a heap of candidates beside it to list any; Space-Saving
// is smaller for the same error and lists the keys by itself.
//
// Time is cut into intervals of Interval. Decisions go to the live
// interval's summaries; when it ends (Tick), they are frozen as a part,
// and six intervals make a minute part, five minutes a five-minute part,
// merged as they end. A read merges the parts its window covers: the
// minute window the live interval and the five before it; the hour window
// the live interval, the rest of its minute, the rest of its five minutes,
// and the eleven five-minute parts before.
//
// Parts merge by adding (Agarwal et al., "Mergeable summaries", 2012): over
// disjoint stretches of the stream, a key's bounds add up, and a part that
// does not monitor a key adds its floor m to the key's upper bound. So
// over a window of N decisions made of parts with floors m_j,
//
//	lower <= occurrences <= upper,   upper-lower <= sum m_j,
//
// and every key that occurred more than sum m_j times is listed. For the
// live and frozen intervals m_j <= N_j/k, so the minute window's error is
// at most N/k. A merged part keeps at most k keys, those with the largest
// lower bounds; as the lower bounds of distinct keys add up to at most N,
// a key dropped had a lower bound of at most N/(k+1), and the merged
// part's floor is the sum of its parts' floors plus that: at most N/k +
// N/(k+1) for a minute part, and N/k + 2N/(k+1) for a five-minute part,
// made of merged minutes. So the hour window's error is below 3N/k.
// With k = Capacity = 64: under 1.6% of the window's decisions for the
// minute, under 4.7% for the hour, for each key reported; the error
// each entry reports is its own, usually far smaller.
//
// # Memory
//
// A sketch holds two live summaries of Capacity counters (40 bytes each),
// their heap and a hash index of 4*Capacity slots (about 8 KiB together);
// 6 + 5 + 12 frozen parts of two summaries each, of at most Capacity
// entries of 40 bytes (at most 118 KiB); and RateSeconds seconds of counts
// by outcome (12 KiB): about 140 KiB per rule, plus the keys themselves,
// at most 2*Capacity*(6+5+12+1) of them, shared between the parts that
// hold the same key (the live summaries keep the strings the decisions
// gave, and the parts the same strings). Sluice's keys are bounded: a
// gateway key part longer than 128 bytes is kept as its digest.
//
// A Sketch is safe for concurrent use.
package topk

import (
	"hash/maphash"
	"sync"
	"time"
)

const (
	// Capacity is the number of keys each summary monitors (k).
	Capacity = 64
	// Interval is the span of time of a live summary.
	Interval = 10 * time.Second
	// RateSeconds is how many seconds of decision counts a sketch keeps.
	RateSeconds = 300
)

const (
	intervalsPerMinute = 6
	minutesPerFive     = 5
	fives              = 12
)

// Outcome is the class of a decision, as the rates count it.
type Outcome uint8

// The outcomes.
const (
	Allowed Outcome = iota
	// Limited: refused by the rule.
	Limited
	// ShadowLimited: over a shadow rule's limit, not refused.
	ShadowLimited
	// Error: the store could not decide.
	Error
	numOutcomes
)

// Window is the span of time a report covers.
type Window uint8

// The windows.
const (
	Minute Window = iota
	Hour
)

// Duration returns the window's span.
func (w Window) Duration() time.Duration {
	if w == Hour {
		return time.Hour
	}
	return time.Minute
}

// By says what a report ranks keys by.
type By uint8

// The rankings.
const (
	// ByLimited ranks by decisions over the limit: refusals, and for
	// shadow rules what would have been refused.
	ByLimited By = iota
	// ByRequests ranks by decisions.
	ByRequests
)

// Entry is one key of a report. Requests and Limited are upper bounds of
// the key's decisions and refusals in the window; the count the report
// ranks by is at least its value minus Error.
type Entry struct {
	Key      string
	Requests uint64
	Limited  uint64
	Error    uint64
}

// Sketch keeps the heavy hitters of one rule. The zero Sketch is not
// usable: use New.
type Sketch struct {
	seed maphash.Seed

	mu sync.Mutex
	// live counts the decisions (0) and refusals (1) of the live interval.
	live [2]summary
	iv   int64 // the live interval's number: Unix time / Interval
	sec  int64 // the current second, as Tick last set it
	// ivs, mins and fivs are rings of frozen parts, each with its number
	// (interval, minute, five minutes): a slot whose number is not the
	// one a read wants is stale.
	ivs   [intervalsPerMinute]frozen
	mins  [minutesPerFive]frozen
	fivs  [fives]frozen
	rates [RateSeconds]rate
}

type frozen struct {
	n     int64
	parts [2]part
	ok    bool
}

type rate struct {
	sec int64
	n   [numOutcomes]uint64
}

// New returns a sketch whose windows end at now.
func New(now time.Time) *Sketch {
	s := &Sketch{seed: maphash.MakeSeed()}
	s.iv = intervalOf(now)
	s.sec = now.Unix()
	return s
}

func intervalOf(t time.Time) int64 { return t.UnixNano() / int64(Interval) }

// Record counts one decision on key, of outcome o, at the time of the
// last Tick. It allocates nothing.
func (s *Sketch) Record(key string, o Outcome) {
	h := maphash.String(s.seed, key)
	s.mu.Lock()
	s.live[0].add(h, key)
	if o == Limited || o == ShadowLimited {
		s.live[1].add(h, key)
	}
	r := &s.rates[uint64(s.sec)%RateSeconds]
	if r.sec != s.sec {
		*r = rate{sec: s.sec}
	}
	if o < numOutcomes {
		r.n[o]++
	}
	s.mu.Unlock()
}

// Tick moves the sketch's clock to now: the intervals that ended are
// frozen, and later decisions count in now's second and interval. A time
// before the last one is ignored.
func (s *Sketch) Tick(now time.Time) {
	iv := intervalOf(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := now.Unix(); sec > s.sec {
		s.sec = sec
	}
	if iv <= s.iv {
		return
	}
	// After an hour without ticks nothing old matters: start afresh.
	if iv-s.iv > intervalsPerMinute*minutesPerFive*fives {
		s.live[0].reset()
		s.live[1].reset()
		s.ivs, s.mins, s.fivs = [intervalsPerMinute]frozen{}, [minutesPerFive]frozen{}, [fives]frozen{}
		s.iv = iv
		return
	}
	for ; s.iv < iv; s.iv++ {
		s.ivs[s.iv%intervalsPerMinute] = frozen{n: s.iv, parts: [2]part{s.live[0].freeze(), s.live[1].freeze()}, ok: true}
		s.live[0].reset()
		s.live[1].reset()
		if (s.iv+1)%intervalsPerMinute != 0 {
			continue
		}
		mn := s.iv / intervalsPerMinute
		s.mins[mn%minutesPerFive] = s.mergeRing(mn, s.ivs[:], mn*intervalsPerMinute, intervalsPerMinute)
		if (mn+1)%minutesPerFive != 0 {
			continue
		}
		five := mn / minutesPerFive
		s.fivs[five%fives] = s.mergeRing(five, s.mins[:], five*minutesPerFive, minutesPerFive)
	}
}

// mergeRing merges the frozen parts numbered from..from+count-1 of ring
// into the part numbered n.
func (s *Sketch) mergeRing(n int64, ring []frozen, from, count int64) frozen {
	var m [2]*merged
	for q := range m {
		m[q] = newMerged()
		for i := from; i < from+count; i++ {
			if f := &ring[i%int64(len(ring))]; f.ok && f.n == i {
				m[q].add(&f.parts[q])
			}
		}
	}
	return frozen{n: n, parts: [2]part{m[0].part(), m[1].part()}, ok: true}
}

// Report is the heavy hitters of one window.
type Report struct {
	// Window is the span of time the report covers.
	Window time.Duration
	// Requests and Limited count the window's decisions and refusals.
	Requests, Limited uint64
	// Entries are the keys, most first.
	Entries []Entry
}

// Top returns the n keys of window w with the most decisions (ByRequests)
// or refusals (ByLimited), most first; only keys with some are listed.
func (s *Sketch) Top(by By, w Window, n int) Report {
	var m [2]*merged
	m[0], m[1] = newMerged(), newMerged()
	s.mu.Lock()
	live := [2]part{s.live[0].freeze(), s.live[1].freeze()}
	add := func(f *frozen) {
		m[0].add(&f.parts[0])
		m[1].add(&f.parts[1])
	}
	add(&frozen{parts: live})
	iv := s.iv
	if w == Minute {
		for i := max(iv-intervalsPerMinute+1, 0); i < iv; i++ {
			if f := &s.ivs[i%intervalsPerMinute]; f.ok && f.n == i {
				add(f)
			}
		}
	} else {
		mn := iv / intervalsPerMinute
		for i := mn * intervalsPerMinute; i < iv; i++ {
			if f := &s.ivs[i%intervalsPerMinute]; f.ok && f.n == i {
				add(f)
			}
		}
		five := mn / minutesPerFive
		for i := five * minutesPerFive; i < mn; i++ {
			if f := &s.mins[i%minutesPerFive]; f.ok && f.n == i {
				add(f)
			}
		}
		for i := max(five-fives+1, 0); i < five; i++ {
			if f := &s.fivs[i%fives]; f.ok && f.n == i {
				add(f)
			}
		}
	}
	s.mu.Unlock()

	rank, other := m[0], m[1]
	if by == ByLimited {
		rank, other = m[1], m[0]
	}
	r := Report{Window: w.Duration(), Requests: m[0].total, Limited: m[1].total}
	es := make([]entry, 0, len(rank.keys))
	for h, a := range rank.keys {
		u, l := rank.bounds(a)
		if l == 0 && u <= rank.floor {
			continue // nothing shows it occurred at all
		}
		es = append(es, entry{hash: h, key: a.key, count: u, err: u - l})
	}
	sortEntries(es, func(e *entry) uint64 { return e.count })
	if n >= 0 && len(es) > n {
		es = es[:n]
	}
	r.Entries = make([]Entry, len(es))
	for i, e := range es {
		var o uint64
		if a := other.keys[e.hash]; a != nil {
			o, _ = other.bounds(a)
		} else if l := other.floor; l > 0 {
			o = l
		}
		o = min(o, otherCap(by, e.count, other.total))
		if by == ByLimited {
			r.Entries[i] = Entry{Key: e.key, Requests: max(o, e.count), Limited: e.count, Error: e.err}
		} else {
			r.Entries[i] = Entry{Key: e.key, Requests: e.count, Limited: o, Error: e.err}
		}
	}
	return r
}

// otherCap bounds the count a report does not rank by: a key's refusals
// are at most its decisions, and either at most the window's total.
func otherCap(by By, ranked, total uint64) uint64 {
	if by == ByRequests {
		return min(ranked, total)
	}
	return total
}

// Rate is the decisions of one second, by outcome.
type Rate struct {
	// Time is the second's start.
	Time time.Time
	// Counts holds the second's decisions by Outcome.
	Counts [numOutcomes]uint64
}

// Rates returns the counts of the last n seconds, at most RateSeconds,
// oldest first, ending with the current one (as Tick last set it).
func (s *Sketch) Rates(n int) []Rate {
	n = min(max(n, 0), RateSeconds)
	out := make([]Rate, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		sec := s.sec - int64(n-1-i)
		out[i].Time = time.Unix(sec, 0)
		if sec < 0 {
			continue
		}
		if r := &s.rates[uint64(sec)%RateSeconds]; r.sec == sec {
			out[i].Counts = r.n
		}
	}
	return out
}

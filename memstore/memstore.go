// Package memstore is Sluice's embedded in-memory store: every algorithm,
// exact, with no allocation per decision on an existing key.
//
// Keys are spread over shards by a seeded hash, each shard guarded by its own
// mutex, so decisions on different keys rarely contend. Idle keys expire by
// themselves: a key is forgotten once its state is back to fresh, by a
// janitor that samples a few entries of each shard per tick (no sweep ever
// stops the world) and by evictions when a shard is full. MaxKeys is a hard
// cap: when a shard is full, a new key evicts an expired entry if the sample
// holds one and otherwise the least recently used one, so that a flood of
// random keys (spoofed IPs, random API keys) cannot exhaust memory; it can
// only make the store forget its least useful keys.
//
// A Store is safe for concurrent use. Its decisions are atomic per key: all
// limits of a policy are checked and charged under one lock.
package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clock"
)

// Clock tells the store the time. *clock.Coarse and *clock.Fake implement
// it; so does any type with a Now method, such as a wrapper of time.Now.
type Clock interface {
	Now() time.Time
}

// nanoClock is the cheaper form the store prefers when a Clock offers it.
type nanoClock interface {
	UnixNano() int64
}

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// MaxKeys caps the entries kept; an entry is one limit's state for one
	// key, so a policy of two limits uses two entries per key. Default
	// 1,000,000. With the default 64 shards each shard holds at most
	// MaxKeys/64 entries.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default 64.
	Shards int
	// Clock tells the time. Default clock.Default(), a monotonic clock read
	// every millisecond (see clock.Coarse).
	Clock Clock
	// SweepInterval is how often the janitor samples each shard for expired
	// entries. Default one second; negative disables the janitor, leaving
	// expiry to evictions and to Sweep.
	SweepInterval time.Duration
}

// Store is the in-memory store. Build one with New and Close it when done.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	clock  Clock
	nano   nanoClock // clock's fast form, or nil
	base   int64     // the clock at New, origin of the second counters

	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

var _ sluice.Store = (*Store)(nil)

type shard struct {
	mu    sync.Mutex
	cells map[cellKey]cell
	logs  map[cellKey]*logCell
	max   int // entry cap
	peak  int // most entries held since the maps were last rebuilt
	_     [64]byte
}

// cellKey identifies the state of one limit (by its policy slot) for one key.
type cellKey struct {
	key  string
	slot uint32
}

// cell is the state of one limit for one key. It holds no pointers, so the
// garbage collector need not scan it.
type cell struct {
	st   algo.State
	exp  uint32 // when st is fresh again, seconds since base, rounded up
	seen uint32 // last access, seconds since base
}

type logCell struct {
	log  algo.Log
	exp  uint32
	seen uint32
}

// New returns a store and starts its janitor.
func New(opts Options) *Store {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.Shards <= 0 {
		opts.Shards = 64
	}
	n := 1
	for n < opts.Shards && n < 1<<16 {
		n <<= 1
	}
	if opts.Clock == nil {
		opts.Clock = clock.Default()
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = time.Second
	}
	s := &Store{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		clock:  opts.Clock,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.nano, _ = opts.Clock.(nanoClock)
	s.base = s.now()
	per := max((opts.MaxKeys+n-1)/n, 1)
	for i := range s.shards {
		s.shards[i].cells = make(map[cellKey]cell)
		s.shards[i].logs = make(map[cellKey]*logCell)
		s.shards[i].max = per
	}
	if opts.SweepInterval > 0 {
		go s.janitor(opts.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

// Close stops the janitor. The store keeps answering afterwards, with expiry
// left to evictions and Sweep. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *Store) now() int64 {
	if s.nano != nil {
		return s.nano.UnixNano()
	}
	return s.clock.Now().UnixNano()
}

// sec converts a time to the store's second counter, rounding up when ceil.
func (s *Store) sec(t int64, ceil bool) uint32 {
	d := t - s.base
	if d <= 0 {
		return 0
	}
	q := d / int64(time.Second)
	if ceil && d%int64(time.Second) != 0 {
		q++
	}
	return uint32(min(q, math.MaxUint32))
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Len returns the number of entries held, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.cells) + len(sh.logs)
		sh.mu.Unlock()
	}
	return n
}

// Take implements sluice.Store.
func (s *Store) Take(_ context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	now := s.now()
	sh := s.shard(key)
	sh.mu.Lock()
	st := sh.decide(s, p, key, now, now, n, true)
	sh.mu.Unlock()
	return sluice.MakeDecision(st, now), nil
}

// Peek implements sluice.Store.
func (s *Store) Peek(_ context.Context, p *sluice.Policy, key string) (sluice.Decision, error) {
	now := s.now()
	sh := s.shard(key)
	sh.mu.Lock()
	st := sh.decide(s, p, key, now, now, 0, false)
	sh.mu.Unlock()
	return sluice.MakeDecision(st, now), nil
}

// Reserve implements sluice.Store.
func (s *Store) Reserve(_ context.Context, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	now := s.now()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var wait int64
	for i := range p.Len() {
		c := sh.cells[cellKey{key, p.Slot(i)}]
		wait = max(wait, p.Rule(i).Wait(c.st, now, n))
	}
	if wait > int64(maxWait) {
		st := sh.decide(s, p, key, now, now, n, false)
		st.Allowed, st.RetryAfter = false, wait
		return sluice.MakeDecision(st, now), nil
	}
	st := sh.decide(s, p, key, now, now+wait, n, true)
	d := sluice.MakeDecision(st, now)
	d.Delay = time.Duration(wait)
	d.ResetAfter += d.Delay
	return d, nil
}

// Cancel implements sluice.Store.
func (s *Store) Cancel(_ context.Context, p *sluice.Policy, key string, n int64, at time.Time) error {
	now := s.now()
	if at.UnixNano() <= now {
		return nil
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range p.Len() {
		k := cellKey{key, p.Slot(i)}
		c, ok := sh.cells[k]
		if !ok {
			continue
		}
		r := p.Rule(i)
		c.st = r.Refund(c.st, now, n)
		if c.st == (algo.State{}) {
			delete(sh.cells, k)
			continue
		}
		c.exp = s.sec(r.Expiry(c.st, now), true)
		sh.cells[k] = c
	}
	return nil
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, p *sluice.Policy, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range p.Len() {
		k := cellKey{key, p.Slot(i)}
		delete(sh.cells, k)
		delete(sh.logs, k)
	}
	return nil
}

// decide evaluates a request of cost n for key under every limit of p at
// time at (now, or later for a reservation) and, if commit is set and every
// limit admits it, charges it. Durations in the result count from at. The
// caller holds sh.mu.
func (sh *shard) decide(s *Store, p *sluice.Policy, key string, now, at, n int64, commit bool) algo.Status {
	seen := s.sec(now, false)
	if p.Len() == 1 {
		return sh.decideOne(s, p, key, seen, at, n, commit)
	}
	var (
		next [sluice.MaxLimits]algo.State
		ttl  [sluice.MaxLimits]int64
		sum  algo.Status
	)
	for i := range p.Len() {
		r, k := p.Rule(i), cellKey{key, p.Slot(i)}
		var st algo.Status
		if r.Algorithm() == algo.SlidingLog {
			if lc := sh.logs[k]; lc != nil {
				st = r.EvalLog(&lc.log, at, n)
			} else {
				st = r.EvalLog(&algo.Log{}, at, n)
			}
		} else {
			next[i], st = r.Eval(sh.cells[k].st, at, n)
		}
		ttl[i] = st.ResetAfter
		st.Index = i
		if i == 0 {
			sum = st
		} else {
			sum = algo.Combine(sum, st)
		}
	}
	if !sum.Allowed || !commit || n == 0 {
		return sum
	}
	for i := range p.Len() {
		r, k := p.Rule(i), cellKey{key, p.Slot(i)}
		exp := s.sec(at+ttl[i], true)
		if r.Algorithm() == algo.SlidingLog {
			sh.record(s, r, k, seen, exp, at, n)
		} else {
			sh.store(k, cell{next[i], exp, seen})
		}
	}
	return sum
}

// decideOne is decide for a policy of one limit: the common case, kept to
// two map operations.
func (sh *shard) decideOne(s *Store, p *sluice.Policy, key string, seen uint32, at, n int64, commit bool) algo.Status {
	r, k := p.Rule(0), cellKey{key, p.Slot(0)}
	if r.Algorithm() == algo.SlidingLog {
		lc := sh.logs[k]
		if lc == nil {
			st := r.EvalLog(&algo.Log{}, at, n)
			if st.Allowed && commit && n > 0 {
				sh.record(s, r, k, seen, s.sec(at+st.ResetAfter, true), at, n)
			}
			return st
		}
		lc.seen = seen
		st := r.EvalLog(&lc.log, at, n)
		if st.Allowed && commit && n > 0 {
			r.Record(&lc.log, at, n)
			lc.exp = s.sec(at+st.ResetAfter, true)
		}
		return st
	}
	c, found := sh.cells[k]
	next, st := r.Eval(c.st, at, n)
	if st.Allowed && commit && n > 0 {
		c = cell{next, s.sec(at+st.ResetAfter, true), seen}
	} else if !found || c.seen == seen {
		return st // nothing to write
	} else {
		c.seen = seen
	}
	if found {
		sh.cells[k] = c
	} else {
		sh.store(k, c)
	}
	return st
}

// store writes a cell, making room first if the key is new and the shard is
// full.
func (sh *shard) store(k cellKey, c cell) {
	if _, ok := sh.cells[k]; !ok {
		sh.makeRoom(k.key, c.seen)
	}
	sh.cells[k] = c
	sh.peak = max(sh.peak, len(sh.cells)+len(sh.logs))
}

func (sh *shard) record(s *Store, r *algo.Rule, k cellKey, seen, exp uint32, at, n int64) {
	lc := sh.logs[k]
	if lc == nil {
		sh.makeRoom(k.key, seen)
		lc = new(logCell)
		sh.logs[k] = lc
		sh.peak = max(sh.peak, len(sh.cells)+len(sh.logs))
	}
	r.Record(&lc.log, at, n)
	lc.exp, lc.seen = exp, seen
}

// evictSample is how many entries an eviction looks at.
const evictSample = 8

// makeRoom evicts one entry if the shard is full: an expired one from a
// sample if there is one, otherwise the least recently seen of the sample.
// Entries of key itself are spared, so that a decision never evicts the
// state it is about to charge.
func (sh *shard) makeRoom(key string, now uint32) {
	if len(sh.cells)+len(sh.logs) < sh.max {
		return
	}
	var (
		victim     cellKey
		victimSeen uint32 = math.MaxUint32
		isLog      bool
		looked     int
	)
	for k, c := range sh.cells {
		if k.key == key {
			continue
		}
		if c.exp <= now {
			delete(sh.cells, k)
			return
		}
		if c.seen < victimSeen {
			victim, victimSeen = k, c.seen
		}
		if looked++; looked >= evictSample {
			break
		}
	}
	looked = 0
	for k, lc := range sh.logs {
		if k.key == key {
			continue
		}
		if lc.exp <= now {
			delete(sh.logs, k)
			return
		}
		if lc.seen < victimSeen {
			victim, victimSeen, isLog = k, lc.seen, true
		}
		if looked++; looked >= evictSample {
			break
		}
	}
	if victimSeen == math.MaxUint32 {
		return // nothing but key itself: let the shard exceed its cap by one policy
	}
	if isLog {
		delete(sh.logs, victim)
	} else {
		delete(sh.cells, victim)
	}
}

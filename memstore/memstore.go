// Package memstore is Sluice's embedded in-memory store: every algorithm,
// exact, with no allocation per decision on an existing key.
//
// Keys are spread over shards by a seeded hash, each shard guarded by its own
// mutex, so decisions on different keys rarely contend. Each shard keeps an
// open-addressing table of 48-byte entries, one per limit per key, holding
// no pointers: an entry is identified by a 96-bit keyed hash of the key and
// the limit's identity (policy name and index) instead of the key's bytes,
// so its size does not depend on the key's length and the garbage collector
// never scans it (see id in table.go for the collision odds), and records
// the limit's definition that wrote it. sliding_log state, whose size grows
// with the limit, lives beside the table.
//
// A decision that finds a state written under another definition of its
// limit (a policy rebuilt with changed limits under the same name) carries
// it to the current one first, as package algo's Rule.Carry describes,
// moving it between the table and the sliding_log state when the algorithm
// changes to or from sliding_log; Peek carries without writing.
//
// Idle keys expire by themselves: an entry is forgotten once its state is
// back to fresh, by a janitor that each tick examines the next few thousand
// slots of every shard, one shard lock at a time (no sweep ever stops the
// world), and by evictions when a shard is full.
//
// MaxKeys is a hard cap. When a shard is full, a new entry evicts the entry
// of a sample that is worth least: an entry is worth the fraction of its
// limit's capacity that its state uses at that moment (what a peek would
// not report as Remaining; for sliding_log, the requests that still
// count). State that is as good as a fresh key's is free to drop, and its
// eviction is not counted in Evicted; a key that used one request of sixty
// is nearly free; a key at its limit is the most valuable to keep. Ties go
// to the least recently used, recency being counted in the shard's
// accesses. A sample is 8 consecutive entries of the shard's table from a
// random slot, and 8 of its sliding_log state if it has any. When the best
// candidate of the sample is at its limit, 64 more entries of the table,
// each drawn uniformly at random (every entry of a table of at most 64),
// and 64 of the sliding_log state are sampled before that candidate goes.
// So an entry at its limit is evicted only when none of 64 entries drawn at
// random from its shard's table (or none of its entries, if it holds 64 or
// fewer) is below its limit, nor any of 64 entries of sliding_log state
// visited in the map's randomized order: while at least half of a shard's
// table entries are below their limits, an eviction takes an entry at its
// limit with odds below 2^-64. (A table less than 1/16 full, its shard
// holding mostly sliding_log state, may draw fewer than 64.) A flood of new
// keys (spoofed IPs, random API keys) each of which has made a request or a
// few therefore cannot push out a client that is being denied, nor one that
// has used more of its limit than the flood's keys have, while memory stays
// capped. Keys at their limits are worth as much as each other: a flood of
// keys that each reach their limit (a limit of one request) competes with
// denied clients on recency alone.
//
// A key denied a request of cost 1 is remembered by its shard until its
// retry time: while it keeps asking (one client hammering past its limit),
// the store answers it without the shard's lock, so its requests neither
// contend on several cores nor slow the shard's other keys.
//
// A Store is safe for concurrent use. Its decisions are atomic per key: all
// limits of a policy are checked and charged under one lock.
package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/storekit"
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
	// key, so a policy of two limits uses two entries per key (and a
	// policy with a penalty one more per key it has denied). Default
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
	seeds  [2]maphash.Seed
	clock  Clock
	nano   nanoClock // clock's fast form, or nil
	base   int64     // the clock at New, origin of the second counters
	leases leases    // concurrency leases; see lease.go

	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

var _ sluice.Store = (*Store)(nil)

type shard struct {
	mu sync.Mutex
	// recent are the first hashes of the keys of the last denials, for
	// deny: in the lock's cache line, which every decision writes anyway.
	recent     [recentDenials]uint64
	nextRecent uint32
	ticks      uint32          // logical clock of accesses, for recency
	tab        table           // state of every limit but sliding_log
	logs       map[id]*logCell // sliding_log state
	max        int             // entry cap
	peak       int             // most sliding_log entries since the last shrink
	cursor     uint64          // the janitor's position in tab
	evicted    atomic.Uint64   // entries evicted before they were fresh again
	// hint has cache lines of its own: it is read without the lock, and
	// the lock's writes must not evict it from the readers' caches.
	_    [64]byte
	hint denyHint
	_    [64]byte
}

type logCell struct {
	log  algo.Log
	def  uint32 // as entry.def
	exp  uint32 // as entry.exp
	seen uint32 // as entry.seen
}

// tick advances the shard's logical clock of accesses and returns it.
// Recency is kept in accesses rather than seconds so that eviction can tell
// a key used a moment ago from the thousands of keys a flood brings in the
// same second.
func (sh *shard) tick() uint32 {
	sh.ticks++
	return sh.ticks
}

func (sh *shard) len() int { return sh.tab.used + len(sh.logs) }

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
		seeds:  [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		clock:  opts.Clock,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.nano, _ = opts.Clock.(nanoClock)
	// The second counters start 2^31 seconds (68 years) before now, so
	// that a clock stepped back before the store's creation still counts.
	s.base = s.now() - 1<<31*int64(time.Second)
	per := max((opts.MaxKeys+n-1)/n, 1)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.tab = table{
			slots: make([]entry, minSlots),
			// A shard exceeds its cap by at most one policy's entries.
			limit: slotsFor(per + sluice.MaxLimits),
			rng:   uint64(i+1) * 0x9e3779b97f4a7c15,
		}
		sh.logs = make(map[id]*logCell)
		sh.max = per
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

// hash returns the key's two hashes and its shard.
func (s *Store) hash(key string) (k0, k1 uint64, sh *shard) {
	k0 = maphash.String(s.seeds[0], key)
	k1 = maphash.String(s.seeds[1], key)
	return k0, k1, &s.shards[s.shardOf(k0)]
}

// shardOf returns the index of the shard of a key whose first hash is k0.
func (s *Store) shardOf(k0 uint64) uint64 { return (k0 >> 32) & s.mask }

// Len returns the number of entries held, expired or not. An entry is one
// limit's state for one key.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}

// MaxKeys returns the cap on the entries the store keeps: Options.MaxKeys,
// rounded up to a multiple of the number of shards.
func (s *Store) MaxKeys() int { return len(s.shards) * s.shards[0].max }

// Evicted returns how many entries the store has evicted to stay within
// MaxKeys while their state still mattered (the limit was not back to fresh
// for the key). It stays zero until the store fills up; while it rises the
// store is forgetting live state, so clients may be admitted more than their
// limits allow: MaxKeys is too small for the keys in use, or a flood of new
// keys is pushing state out. Entries removed to make room whose state was
// expired, or as good as fresh, are not counted. It is safe to call
// concurrently with decisions.
func (s *Store) Evicted() uint64 {
	var n uint64
	for i := range s.shards {
		n += s.shards[i].evicted.Load()
	}
	return n
}

// Take implements sluice.Store.
func (s *Store) Take(_ context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	sp := storekit.Of(p)
	if pen := sp.Penalty(); pen != nil {
		return s.takePenalized(p, sp, pen, key, n), nil
	}
	now := s.now()
	k0, k1, sh := s.hash(key)
	if sh.mayHint(p, n) {
		if i, st, ok := sh.hint.get(p, k0, k1, now); ok {
			return sp.Decision(i, st, now), nil
		}
	}
	sh.mu.Lock()
	i, st := sh.decide(s, sp, k0, k1, now, now, n, true, true)
	if sh.concerns(st) {
		sh.note(p, k0, k1, n, now, i, st)
	}
	sh.mu.Unlock()
	return sp.Decision(i, st, now), nil
}

// Peek implements sluice.Store.
func (s *Store) Peek(_ context.Context, p *sluice.Policy, key string) (sluice.Decision, error) {
	sp := storekit.Of(p)
	now := s.now()
	k0, k1, sh := s.hash(key)
	sh.mu.Lock()
	if sp.Penalty() != nil {
		if d, ok := sh.blocked(p, sp, k0, k1, 0, now); ok {
			sh.mu.Unlock()
			return d, nil
		}
	}
	i, st := sh.decide(s, sp, k0, k1, now, now, 0, false, false)
	sh.mu.Unlock()
	return sp.Decision(i, st, now), nil
}

// Reserve implements sluice.Store.
func (s *Store) Reserve(_ context.Context, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	sp := storekit.Of(p)
	now := s.now()
	k0, k1, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sp.Penalty() != nil {
		if d, ok := sh.blocked(p, sp, k0, k1, 0, now); ok {
			return d, nil
		}
	}
	sh.hint.clear()
	c := clocks{now: s.sec(now, false), seen: sh.tick(), ns: now}
	var wait int64
	for i := range sp.Len() {
		k := entryID(k0, k1, sp.Slot(i))
		sh.carryIfStale(s, sp.Rule(i), sp.Def(i), k, c, now)
		wait = max(wait, sp.Rule(i).Wait(sh.state(k), now, n))
	}
	if wait > int64(maxWait) {
		i, st := sh.decide(s, sp, k0, k1, now, now, n, false, true)
		st.Allowed, st.RetryAfter = false, wait
		return sp.Decision(i, st, now), nil
	}
	i, st := sh.decide(s, sp, k0, k1, now, now+wait, n, true, true)
	d := sp.Decision(i, st, now)
	d.Delay = time.Duration(wait)
	d.ResetAfter += d.Delay
	return d, nil
}

// Cancel implements sluice.Store.
func (s *Store) Cancel(_ context.Context, p *sluice.Policy, key string, n int64, at time.Time) error {
	sp := storekit.Of(p)
	now := s.now()
	if at.UnixNano() <= now {
		return nil
	}
	k0, k1, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.hint.clear()
	c := clocks{now: s.sec(now, false), seen: sh.tick(), ns: now}
	for i := range sp.Len() {
		k := entryID(k0, k1, sp.Slot(i))
		sh.carryIfStale(s, sp.Rule(i), sp.Def(i), k, c, now)
		j, ok := sh.tab.lookup(k)
		if !ok {
			continue
		}
		r, e := sp.Rule(i), &sh.tab.slots[j]
		e.st = r.Refund(e.st, now, n)
		if e.st == (algo.State{}) {
			sh.tab.remove(j)
			continue
		}
		e.exp = s.sec(r.Expiry(e.st, now), true)
	}
	return nil
}

// Reset implements sluice.Store.
func (s *Store) Reset(_ context.Context, p *sluice.Policy, key string) error {
	sp := storekit.Of(p)
	k0, k1, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.hint.clear()
	for i := range sp.Len() {
		k := entryID(k0, k1, sp.Slot(i))
		if j, ok := sh.tab.lookup(k); ok {
			sh.tab.remove(j)
		}
		delete(sh.logs, k)
	}
	if sp.Penalty() != nil {
		if j, ok := sh.tab.lookup(entryID(k0, k1, sp.PenaltySlot())); ok {
			sh.tab.remove(j)
		}
	}
	return nil
}

// state returns the stored state with id k, or the zero State.
func (sh *shard) state(k id) algo.State {
	if j, ok := sh.tab.lookup(k); ok {
		return sh.tab.slots[j].st
	}
	return algo.State{}
}

// decide evaluates a request of cost n for the key with hashes k0, k1 under
// every limit of p at time at (now, or later for a reservation) and, if
// commit is set and every limit admits it, charges it. A state written
// under another definition of its limit is carried to p's at now first,
// and the carried state written back if write is set. It returns the index
// and status of the binding limit; durations count from at. The caller
// holds sh.mu.
func (sh *shard) decide(s *Store, p storekit.Policy, k0, k1 uint64, now, at, n int64, commit, write bool) (int, algo.Status) {
	c := clocks{now: s.sec(now, false), seen: sh.tick(), ns: now}
	if p.Len() == 1 && p.Rule(0).Algorithm() != algo.SlidingLog {
		return 0, sh.decideOne(s, p, entryID(k0, k1, p.Slot(0)), c, at, n, commit, write)
	}
	var buf [sluice.MaxLimits]charge
	bind, sum, ch := sh.evaluate(s, p, k0, k1, c, at, n, write, buf[:0])
	if sum.Allowed && commit && n > 0 {
		sh.charge(s, p, ch, c, at, n)
	}
	return bind, sum
}

// charge is what charging one limit of an evaluated request writes: the id
// of the limit's state for the key, the state after the request (unused for
// sliding_log, whose log records the request instead), and how long from
// the request's time until that state is fresh again.
type charge struct {
	k    id
	def  uint32
	next algo.State
	ttl  int64
}

// evaluate evaluates a request of cost n for the key with hashes k0, k1
// under every limit of p at time at, charging nothing (it only refreshes the
// recency of the entries it reads). A state written under another
// definition of its limit is carried to p's at now, and written back if
// write is set. It returns the index and status of the binding limit, and
// ch with one charge per limit of p appended, for charge to write if the
// request is to be charged. The caller holds sh.mu.
func (sh *shard) evaluate(s *Store, p storekit.Policy, k0, k1 uint64, c clocks, at, n int64, write bool, ch []charge) (int, algo.Status, []charge) {
	now := c.ns
	var (
		sum  algo.Status
		bind int
	)
	for i := range p.Len() {
		r, def, k := p.Rule(i), p.Def(i), entryID(k0, k1, p.Slot(i))
		var (
			st   algo.Status
			next algo.State
		)
		// A state written under another definition is carried first: in
		// place if write is set, else into a copy. Both lookups below
		// also tell whether it was, so the common case costs one.
		if r.Algorithm() == algo.SlidingLog {
			lc := sh.logs[k]
			stale := lc != nil && lc.def != def
			if lc == nil && sh.tab.used > 0 {
				_, stale = sh.tab.lookup(k)
			}
			switch {
			case stale && !write:
				_, lg := sh.carried(r, k, now)
				st = r.EvalLog(lg, at, n)
			case stale:
				sh.carry(s, r, def, k, c, now)
				lc = sh.logs[k]
				fallthrough
			default:
				if lc != nil {
					lc.seen = c.seen
					st = r.EvalLog(&lc.log, at, n)
				} else {
					st = r.EvalLog(&algo.Log{}, at, n)
				}
			}
		} else {
			j, found := sh.tab.lookup(k)
			stale := found && sh.tab.slots[j].def != def || !found && len(sh.logs) > 0 && p.MayLog(i) && sh.logs[k] != nil
			switch {
			case stale && !write:
				cur, _ := sh.carried(r, k, now)
				next, st = r.Eval(cur, at, n)
			case stale:
				sh.carry(s, r, def, k, c, now)
				j, found = sh.tab.lookup(k)
				fallthrough
			default:
				var cur algo.State
				if found {
					e := &sh.tab.slots[j]
					e.seen, cur = c.seen, e.st
				}
				next, st = r.Eval(cur, at, n)
			}
		}
		ch = append(ch, charge{k: k, def: def, next: next, ttl: st.ResetAfter})
		if i == 0 || algo.Binds(sum, st) {
			sum, bind = st, i
		}
	}
	return bind, sum, ch
}

// charge writes the charges ch that evaluate returned for a request of cost
// n under p at time at, one per limit of p, adding entries as needed. An
// eviction to make room spares the request's own entries. The caller holds
// sh.mu.
func (sh *shard) charge(s *Store, p storekit.Policy, ch []charge, c clocks, at, n int64) {
	var ids [sluice.MaxLimits]id
	for i := range ch {
		ids[i] = ch[i].k
	}
	keep := ids[:len(ch)]
	for i := range ch {
		r, k := p.Rule(i), ch[i].k
		exp := s.sec(at+ch[i].ttl, true)
		if r.Algorithm() == algo.SlidingLog {
			sh.record(r, ch[i].def, k, keep, c, exp, at, n)
			continue
		}
		e := sh.entry(k, keep, c)
		e.st, e.exp, e.def = ch[i].next, exp, ch[i].def
	}
}

// decideOne is decide for a policy p of one limit that is not a
// sliding_log: the common case, kept to one lookup and an update in place.
func (sh *shard) decideOne(s *Store, p storekit.Policy, k id, c clocks, at, n int64, commit, write bool) algo.Status {
	r, def := p.Rule(0), p.Def(0)
	j, found := sh.tab.lookup(k)
	if found && sh.tab.slots[j].def != def || !found && len(sh.logs) > 0 && p.MayLog(0) && sh.logs[k] != nil {
		if !write {
			cur, _ := sh.carried(r, k, c.ns)
			_, st := r.Eval(cur, at, n)
			return st
		}
		sh.carry(s, r, def, k, c, c.ns)
		j, found = sh.tab.lookup(k)
	}
	if !found {
		next, st := r.Eval(algo.State{}, at, n)
		if st.Allowed && commit && n > 0 {
			e := sh.add(k, []id{k}, c)
			e.st, e.exp, e.def = next, s.sec(at+st.ResetAfter, true), def
		}
		return st
	}
	e := &sh.tab.slots[j]
	next, st := r.Eval(e.st, at, n)
	if st.Allowed && commit && n > 0 {
		e.st, e.exp = next, s.sec(at+st.ResetAfter, true)
	}
	e.seen = c.seen
	return st
}

// entry returns the entry with id k, adding it if needed; an eviction to
// make room spares the ids in keep.
func (sh *shard) entry(k id, keep []id, c clocks) *entry {
	if j, ok := sh.tab.lookup(k); ok {
		e := &sh.tab.slots[j]
		e.seen = c.seen
		return e
	}
	return sh.add(k, keep, c)
}

// add inserts a new entry, evicting one first if the shard is full.
func (sh *shard) add(k id, keep []id, c clocks) *entry {
	sh.makeRoom(keep, c)
	e := &sh.tab.slots[sh.tab.insert(k)]
	e.seen = c.seen
	return e
}

func (sh *shard) record(r *algo.Rule, def uint32, k id, keep []id, c clocks, exp uint32, at, n int64) {
	lc := sh.logs[k]
	if lc == nil {
		sh.makeRoom(keep, c)
		lc = new(logCell)
		sh.logs[k] = lc
		sh.peak = max(sh.peak, len(sh.logs))
	}
	r.Record(&lc.log, at, n)
	lc.exp, lc.seen, lc.def = exp, c.seen, def
}

// stale reports whether the shard holds state with id k written under a
// definition other than def, the definition of rule r: in the table or
// among the logs, whichever r does not keep its state in. The caller holds
// sh.mu.
func (sh *shard) stale(r *algo.Rule, def uint32, k id) bool {
	if r.Algorithm() == algo.SlidingLog {
		if lc := sh.logs[k]; lc != nil {
			return lc.def != def
		}
		_, found := sh.tab.lookup(k)
		return found
	}
	if j, found := sh.tab.lookup(k); found {
		return sh.tab.slots[j].def != def
	}
	return len(sh.logs) > 0 && sh.logs[k] != nil
}

// carryIfStale carries the state with id k to rule r of definition def at
// time now if it was written under another definition (see carry).
func (sh *shard) carryIfStale(s *Store, r *algo.Rule, def uint32, k id, c clocks, now int64) {
	if sh.stale(r, def, k) {
		sh.carry(s, r, def, k, c, now)
	}
}

// carry replaces the state with id k, written under another definition, by
// that state carried to rule r of definition def at time now (see
// algo.Rule.Carry), in the table or among the logs as r keeps it, and
// forgets it when the carried state is fresh. The shard's count of entries
// does not change, so nothing is evicted. The hint is cleared: a denial it
// holds may not survive the carry. The caller holds sh.mu.
func (sh *shard) carry(s *Store, r *algo.Rule, def uint32, k id, c clocks, now int64) {
	sh.hint.clear()
	isLog := r.Algorithm() == algo.SlidingLog
	if j, found := sh.tab.lookup(k); found {
		e := &sh.tab.slots[j]
		from, st := storekit.DefRule(e.def), e.st
		if from == nil {
			st = algo.State{}
			from = r
		}
		if !isLog {
			e.st, e.def, e.seen = r.Carry(from, st, now), def, c.seen
			if e.st == (algo.State{}) {
				sh.tab.remove(j)
			} else {
				e.exp = s.sec(r.Expiry(e.st, now), true)
			}
			return
		}
		sh.tab.remove(j)
		lc := &logCell{def: def, seen: c.seen}
		if from.Algorithm() != algo.SlidingLog {
			r.CarryToLog(from, st, now, &lc.log)
		}
		if lc.log.Len() > 0 {
			lc.exp = s.sec(r.LogExpiry(&lc.log, now), true)
			sh.logs[k] = lc
			sh.peak = max(sh.peak, len(sh.logs))
		}
		return
	}
	lc := sh.logs[k]
	if lc == nil {
		return
	}
	from := storekit.DefRule(lc.def)
	if from == nil || from.Algorithm() != algo.SlidingLog {
		delete(sh.logs, k)
		return
	}
	if isLog {
		r.CarryLog(from, &lc.log, now)
		lc.def, lc.seen = def, c.seen
		if lc.log.Len() == 0 {
			delete(sh.logs, k)
		} else {
			lc.exp = s.sec(r.LogExpiry(&lc.log, now), true)
		}
		return
	}
	st := r.CarryFromLog(from, &lc.log, now)
	delete(sh.logs, k)
	if st == (algo.State{}) {
		return
	}
	e := &sh.tab.slots[sh.tab.insert(k)]
	e.def, e.st, e.exp, e.seen = def, st, s.sec(r.Expiry(st, now), true), c.seen
}

// carried returns the state with id k carried to rule r at time now, as
// carry would write it, without changing anything: a State, or for a
// sliding_log rule a Log of its own. The caller holds sh.mu.
func (sh *shard) carried(r *algo.Rule, k id, now int64) (algo.State, *algo.Log) {
	isLog := r.Algorithm() == algo.SlidingLog
	if j, found := sh.tab.lookup(k); found {
		e := &sh.tab.slots[j]
		from := storekit.DefRule(e.def)
		switch {
		case from == nil && isLog:
			return algo.State{}, &algo.Log{}
		case from == nil:
			return algo.State{}, nil
		case isLog:
			lg := new(algo.Log)
			r.CarryToLog(from, e.st, now, lg)
			return algo.State{}, lg
		}
		return r.Carry(from, e.st, now), nil
	}
	lc := sh.logs[k]
	var from *algo.Rule
	if lc != nil {
		from = storekit.DefRule(lc.def)
	}
	switch {
	case from == nil && isLog:
		return algo.State{}, &algo.Log{}
	case from == nil:
		return algo.State{}, nil
	case isLog:
		lg := lc.log.Clone()
		r.CarryLog(from, lg, now)
		return algo.State{}, lg
	}
	return r.CarryFromLog(from, &lc.log, now), nil
}

// clocks are the times a decision stamps on entries: now in the store's
// seconds, against which expiry is checked, the shard's access tick, and now
// in nanoseconds, at which eviction values the state it samples.
type clocks struct {
	now, seen uint32
	ns        int64
}

// Eviction samples evictSample entries of the table, and as many of the
// sliding_log state, and widens the sample by evictWiden of each when the
// best candidate is at its limit.
const (
	evictSample = 8
	evictWiden  = 64
)

// worth is what keeping an entry is worth: the fraction used/capacity of
// its limit's capacity that its state uses now (for sliding_log, the
// requests that still count). Fractions are compared exactly, by
// multiplying across, so that a sample costs no division.
type worth struct{ used, capacity int64 }

// worthOf returns what keeping state st of rule r is worth at time ns, and
// whether st is as good as fresh, so free to drop. A state of a definition
// the process does not know (none is recorded without one) is worth
// nothing.
func worthOf(r *algo.Rule, st algo.State, ns int64) (worth, bool) {
	if r == nil {
		return worth{0, 1}, false
	}
	w := worth{r.Used(st, ns), r.Capacity()}
	return w, w.used <= 0
}

// logWorthOf is worthOf for a sliding_log.
func logWorthOf(r *algo.Rule, lg *algo.Log, ns int64) (worth, bool) {
	if r == nil {
		return worth{0, 1}, false
	}
	w := worth{r.LogUsed(lg, ns), r.Capacity()}
	return w, w.used <= 0
}

// full reports whether the state uses all of its capacity: a key at its
// limit.
func (w worth) full() bool { return w.used >= w.capacity }

// less reports whether w is worth less than x. Usage beyond the capacity
// (reservations queued beyond a bucket) counts as the capacity.
func (w worth) less(x worth) bool {
	hi1, lo1 := bits.Mul64(uint64(min(w.used, w.capacity)), uint64(x.capacity))
	hi2, lo2 := bits.Mul64(uint64(min(x.used, x.capacity)), uint64(w.capacity))
	return hi1 < hi2 || hi1 == hi2 && lo1 < lo2
}

// victim is the entry an eviction has chosen so far: in the table at idx,
// or among the logs under k.
type victim struct {
	ok, log, free bool
	idx           uint64
	k             id
	worth         worth
	age           uint32
}

// consider offers an entry worth w, of the given age in access ticks: it
// becomes the victim if it is worth less, or as much and older.
func (v *victim) consider(log bool, idx uint64, k id, w worth, age uint32) {
	if v.ok && (v.worth.less(w) || !w.less(v.worth) && age <= v.age) {
		return
	}
	*v = victim{ok: true, log: log, idx: idx, k: k, worth: w, age: age}
}

// makeRoom evicts one entry if the shard is full: the entry worth least in
// a sample, where an entry's worth is the fraction of its limit's capacity
// its state uses now (see worth), ties going to the least recently seen.
// An entry that is fresh again, or expired, goes at once and is not counted
// in Evicted. When the best candidate of the sample is at its limit, the
// sample widens to evictWiden entries of the table and as many of the logs
// before that entry goes: a key at its limit (a denied client) is evicted
// only when none of the sampled entries is below its limit.
//
// The ids in keep, those of the decision being made, are spared, so that a
// decision never evicts the state it is about to charge; so are the hinted
// key's, unless nothing else is left.
func (sh *shard) makeRoom(keep []id, c clocks) {
	if sh.len() < sh.max {
		return
	}
	var buf [2*sluice.MaxLimits + 2]id
	spared := sh.hint.spare(keep, &buf)
	v := sh.choose(spared, c)
	if !v.ok && len(spared) > len(keep) {
		// Only the hinted key is left to evict: the cap comes first.
		v = sh.choose(keep, c)
	}
	if !v.ok {
		// Only the decision's own entries are left: the shard exceeds
		// its cap by at most one policy's entries.
		return
	}
	if !v.free {
		sh.evicted.Add(1)
	}
	if v.log {
		delete(sh.logs, v.k)
	} else {
		sh.tab.remove(v.idx)
	}
}

// choose picks the entry makeRoom evicts, sparing the ids in keep: the
// entry worth least among evictSample consecutive entries of the table from
// a random slot, and as many of the logs; or, if the best of those is at
// its limit, among them and a wider sample (see widen). An entry free to
// drop is chosen as soon as it is met.
func (sh *shard) choose(keep []id, c clocks) victim {
	var v victim
	if i, free := sh.sampleTable(&v, keep, c); free {
		return victim{ok: true, free: true, idx: i}
	}
	if len(sh.logs) > 0 {
		if k, free := sh.sampleLogs(&v, keep, c, evictSample); free {
			return victim{ok: true, free: true, log: true, k: k}
		}
	}
	if v.ok && v.worth.full() {
		return sh.widen(v, keep, c)
	}
	return v
}

// sampleTable offers to v up to evictSample entries of the table that are
// not in keep, consecutive from a random slot on. It returns the index of
// an entry that is free to drop, and true, as soon as it meets one.
func (sh *shard) sampleTable(v *victim, keep []id, c clocks) (uint64, bool) {
	t := &sh.tab
	if t.used == 0 {
		return 0, false
	}
	i, looked := t.home(t.random()), 0
	for n := 0; n < len(t.slots) && looked < evictSample; n, i = n+1, t.next(i) {
		free, offered := sh.offer(v, i, keep, c)
		if free {
			return i, true
		}
		if offered {
			looked++
		}
	}
	return 0, false
}

// widen samples further when the best candidate v is at its limit: every
// entry of the table if it holds at most evictWiden, otherwise evictWiden
// entries each drawn uniformly at random (slots drawn at random, empty ones
// drawn again, up to 16×evictWiden draws in all), and evictWiden entries of
// the logs. Drawn independently, the entries of the wider sample are all at
// their limits with odds f^evictWiden, f being the share of the table's
// entries at their limits. Consecutive entries would not do: evictions
// thin out the entries below their limits around the slots they sample,
// packing those at their limits together (a flood test evicted keys at
// their limits a thousand times more often than independent samples of 8
// would have).
func (sh *shard) widen(v victim, keep []id, c clocks) victim {
	t := &sh.tab
	if t.used <= evictWiden {
		for i := range uint64(len(t.slots)) {
			if free, _ := sh.offer(&v, i, keep, c); free {
				return victim{ok: true, free: true, idx: i}
			}
		}
	} else {
		for drawn, tries := 0, 0; drawn < evictWiden && tries < 16*evictWiden; tries++ {
			i := t.home(t.random())
			free, offered := sh.offer(&v, i, keep, c)
			if free {
				return victim{ok: true, free: true, idx: i}
			}
			if offered {
				drawn++
			}
		}
	}
	if len(sh.logs) > 0 {
		if k, free := sh.sampleLogs(&v, keep, c, evictWiden); free {
			return victim{ok: true, free: true, log: true, k: k}
		}
	}
	return v
}

// offer offers the entry in slot i to v, unless the slot is empty or the
// entry is in keep, and reports whether the entry is free to drop (expired,
// or as good as fresh) and whether it was offered.
func (sh *shard) offer(v *victim, i uint64, keep []id, c clocks) (free, offered bool) {
	e := &sh.tab.slots[i]
	if e.a == 0 {
		return false, false
	}
	for _, k := range keep {
		if e.is(k) {
			return false, false
		}
	}
	if e.exp <= c.now {
		return true, true
	}
	if e.def == 0 {
		// A penalty record: worth as much as a key at its limit while
		// it blocks, so that a flood of new keys cannot lift a block;
		// as little as can be otherwise (its offences still count).
		v.consider(false, i, id{}, worth{penaltyWorth(e.st, c.ns), 1}, c.seen-e.seen)
		return false, true
	}
	w, free := worthOf(storekit.DefRule(e.def), e.st, c.ns)
	if free {
		return true, true
	}
	// Ticks wrap around; the difference is the age all the same.
	v.consider(false, i, id{}, w, c.seen-e.seen)
	return false, true
}

// sampleLogs offers to v up to n entries of the sliding_log state that are
// not in keep, and returns the id of one that is free to drop, and true, as
// soon as it meets one. Map iteration starts at a random entry.
func (sh *shard) sampleLogs(v *victim, keep []id, c clocks, n int) (id, bool) {
	looked := 0
logs:
	for k, lc := range sh.logs {
		for _, kk := range keep {
			if k == kk {
				continue logs
			}
		}
		if lc.exp <= c.now {
			return k, true
		}
		w, free := logWorthOf(storekit.DefRule(lc.def), &lc.log, c.ns)
		if free {
			return k, true
		}
		v.consider(true, 0, k, w, c.seen-lc.seen)
		if looked++; looked >= n {
			break
		}
	}
	return id{}, false
}

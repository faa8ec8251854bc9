package redisstore

import (
	"context"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// The fallback across an outage (Options.OnError Local).
//
// While Redis fails, the fallback store decides. Two things keep the
// switch to it, and the switch back, from admitting anything twice.
//
// The fallback starts from what the store knows of a key. In exact mode
// every request that Redis admits is also charged to the fallback
// (mirror), which so holds everything this process has admitted: one
// in-memory decision more per admitted request, beside a round trip to
// Redis. In lease and async mode the store knows more, for free: every
// call of Redis for a key (a grant, a sync) sets the key's state in the
// fallback to the count Redis answered (mirrorState), which includes the
// other processes' units; a view whose sync fails gives the fallback the
// units it admitted since (takeAsync).
//
// Redis learns what the fallback admitted. Every request the fallback
// admits is recorded in the store's tab, per policy and key, and charged to
// Redis when it returns, whatever Redis then holds (sluice.lua's op
// "charge"): before the key's next decision in Redis (settled), and for
// every key in the background as soon as a call of Redis succeeds
// (settleSoon). A unit is charged as of when it was admitted: a window's
// units to their window, if it is still the current one (a sliding
// window's also to the one before), a log's entries at their times, and a
// bucket's as the debt they still leave, which is what the fallback's
// bucket holds beyond what it started from, both refilling. What has
// expired by the time Redis returns (a window over, a bucket refilled) is
// not charged, so a long outage charges only what still counts. A key that
// Redis has lost meanwhile (a restart without persistence, an eviction) is
// first given what the fallback started from (its floor), for the limit
// that bound the fallback's first decision on it. The tab keeps at most
// maxTab keys; it forgets keys that hold nothing more to charge.

// maxTab is the most keys (per policy definition) the tab holds: about 50
// MiB at most. Requests the fallback admits for further keys are not
// charged to Redis.
const maxTab = 1 << 18

// tab is what the fallback admitted while Redis failed, per policy and key,
// not yet charged to Redis. It is safe for concurrent use.
type tab struct {
	pending  atomic.Int64 // entries in m: decisions look their key up only when it is not zero
	settling atomic.Bool  // a background settle runs

	mu      sync.Mutex
	m       map[tabKey][]*tabEntry // one per definition of the policy's limits: one but after a reload
	sweepAt int                    // the size of m at which record sweeps it
}

type tabKey struct{ name, key string }

// tabEntry is what the fallback admitted for one key under one definition
// of a policy's limits. Its fields are guarded by mu, which a charge holds
// through its call of Redis, so that a decision on the key waits for it.
type tabEntry struct {
	mu     sync.Mutex
	p      *sluice.Policy
	sp     storekit.Policy // p's limits
	c      *compiled
	gone   bool // charged to Redis and out of the table
	limits []tabLimit
}

// tabLimit is what one limit of an entry holds: for a window, the
// fallback's admissions (algo's state); for a bucket, the state the
// fallback's bucket started from, refilling (warm), and that state charged
// with the fallback's admissions (st), so that the debt they leave is
// st's less warm's; for a sliding log, its entries. And, when the store
// knows it, what the fallback held before its first admission (floor: for
// a bucket, warm; for the others, floor units as of floorAt), which Redis
// is given if it has lost the key meanwhile.
type tabLimit struct {
	st, warm algo.State
	log      *algo.Log

	floored bool
	floor   int64
	floorAt int64
}

// record adds n units that the fallback admitted at time at (ns, on its
// clock) for key under p; d is its decision.
func (t *tab) record(p *sluice.Policy, c *compiled, key string, n, at int64, d sluice.Decision) {
	k := tabKey{p.Name(), key}
	for {
		t.mu.Lock()
		if t.m == nil {
			t.m, t.sweepAt = make(map[tabKey][]*tabEntry), 1024
		}
		var e *tabEntry
		for _, x := range t.m[k] {
			if slices.Equal(x.c.args, c.args) {
				e = x
			}
		}
		if e == nil {
			if len(t.m) >= t.sweepAt {
				t.sweep(at)
			}
			if len(t.m) >= maxTab {
				t.mu.Unlock()
				return
			}
			e = newTabEntry(p, c, n, at, d)
			t.m[k] = append(t.m[k], e)
			t.pending.Add(1)
		}
		t.mu.Unlock()
		e.mu.Lock()
		if !e.gone {
			e.add(n, at)
			e.mu.Unlock()
			return
		}
		e.mu.Unlock() // charged meanwhile: record in a new entry
	}
}

// newTabEntry returns the entry of a key whose first admission by the
// fallback, of n units at time at, was decided d, which tells what the
// fallback held before for the limit that bound it (a policy's only limit,
// nearly always). A bucket's warm state is that, rounded up; a bucket
// limit that did not bind is taken to have had no tokens left. Starting
// from more debt than the fallback's bucket held can only charge more: the
// debt the admissions leave beyond the start's, once both have refilled
// down to nothing, never shrinks as the start grows.
func newTabEntry(p *sluice.Policy, c *compiled, n, at int64, d sluice.Decision) *tabEntry {
	e := &tabEntry{p: p, sp: storekit.Of(p), c: c, limits: make([]tabLimit, p.Len())}
	for i := range e.limits {
		r, l := e.sp.Rule(i), &e.limits[i]
		known := i == d.Index
		switch {
		case r.Algorithm().IsBucket():
			u := r.Burst()
			if known {
				// d's ResetAfter is the time the debt after n takes to
				// refill, rounded up to a nanosecond.
				u = min(max(units(r, d.ResetAfter, true)-n, 0), r.Burst())
			}
			if u > 0 {
				l.warm, _ = r.Eval(algo.State{}, at, u)
				l.st = l.warm
			}
			l.floored = known
		case known:
			l.floor, l.floorAt = max(r.Count()-d.Remaining-n, 0), at
		}
		if r.Algorithm() == algo.SlidingLog {
			l.log = new(algo.Log)
		}
	}
	return e
}

// add records n units admitted at time at. A bucket is charged whatever it
// holds (at the time they fit, which for its debt is the same).
func (e *tabEntry) add(n, at int64) {
	for i := range e.limits {
		r, l := e.sp.Rule(i), &e.limits[i]
		switch {
		case l.log != nil:
			if r.EvalLog(l.log, at, n).Allowed {
				r.Record(l.log, at, n)
			}
		case r.Algorithm().IsBucket():
			l.st, _ = r.Eval(l.st, at+r.Wait(l.st, at, n), n)
		default:
			// A window holds no more than the fallback's own, which
			// admitted these units.
			if st, s := r.Eval(l.st, at, n); s.Allowed {
				l.st = st
			}
		}
	}
}

// charges returns the arguments of sluice.lua's op "charge" for the
// entry's limits at time now (ns), and whether any holds something: the
// units that still count, then the floor if it still counts.
func (e *tabEntry) charges(now int64) ([]string, bool) {
	out := make([]string, len(e.limits))
	some := false
	for i := range e.limits {
		r, l := e.sp.Rule(i), &e.limits[i]
		var b, f []byte
		switch {
		case l.log != nil:
			for at, n := range l.log.All() {
				if at > now-int64(r.Period()) {
					b = appendInts(b, (at+999)/1000, n)
				}
			}
			if l.floor > 0 && l.floorAt > now-int64(r.Period()) {
				f = appendInts(f, (l.floorAt+999)/1000, l.floor)
			}
		case r.Algorithm().IsBucket():
			if u := r.Used(l.st, now) - r.Used(l.warm, now); u > 0 {
				b = appendInts(b, u)
			}
			if u := r.Used(l.warm, now); l.floored && u > 0 {
				f = appendInts(f, u)
			}
		default:
			if r.Used(l.st, now) > 0 {
				b = appendInts(b, l.st.T/1000, l.st.A, l.st.B)
			}
			if l.floor > 0 {
				// The floor as the state of a fallback that had admitted
				// it in its window (in a sliding window's current count).
				start, _ := r.Window(l.floorAt)
				fl := algo.State{T: start, A: l.floor}
				if r.Algorithm() == algo.SlidingWindow {
					fl = algo.State{T: start, B: l.floor}
				}
				if r.Used(fl, now) > 0 {
					f = appendInts(f, fl.T/1000, fl.A, fl.B)
				}
			}
		}
		if len(b)+len(f) > 0 {
			out[i] = string(b) + ";" + string(f)
			some = true
		}
	}
	return out, some
}

// appendInts appends the integers vs to b, each followed by a comma.
func appendInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ',')
	}
	return b
}

// units returns the units a bucket rule r refills in d, rounded up or
// down; 0 for a d that is not positive.
func units(r *algo.Rule, d time.Duration, up bool) int64 {
	if d <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(d), uint64(r.Count()))
	if hi >= uint64(r.Period()) {
		return r.Burst() // more than any bucket of r holds
	}
	q, rem := bits.Div64(hi, lo, uint64(r.Period()))
	if up && rem != 0 {
		q++
	}
	return int64(min(q, uint64(r.Burst())))
}

// sweep drops the entries that have nothing left to charge at now; the
// caller holds t.mu.
func (t *tab) sweep(now int64) {
	for k, ents := range t.m {
		kept := ents[:0]
		for _, e := range ents {
			if e.mu.TryLock() {
				if _, some := e.charges(now); !some {
					e.gone = true
					t.pending.Add(-1)
					e.mu.Unlock()
					continue
				}
				e.mu.Unlock()
			}
			kept = append(kept, e)
		}
		if len(kept) == 0 {
			delete(t.m, k)
		} else {
			t.m[k] = kept
		}
	}
	t.sweepAt = max(2*len(t.m), 1024)
}

// remove takes e, gone, out of the table.
func (t *tab) remove(k tabKey, e *tabEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ents := t.m[k]
	if i := slices.Index(ents, e); i >= 0 {
		ents = slices.Delete(ents, i, i+1)
		t.pending.Add(-1)
	}
	if len(ents) == 0 {
		delete(t.m, k)
	} else {
		t.m[k] = ents
	}
}

// forget drops what the tab holds for key under the policy named name
// (for Reset).
func (t *tab) forget(name, key string) {
	if t.pending.Load() == 0 {
		return
	}
	k := tabKey{name, key}
	t.mu.Lock()
	ents := t.m[k]
	delete(t.m, k)
	t.pending.Add(-int64(len(ents)))
	t.mu.Unlock()
	for _, e := range ents {
		e.mu.Lock()
		e.gone = true
		e.mu.Unlock()
	}
}

// snapshot returns every entry and its key.
func (t *tab) snapshot() ([]tabKey, []*tabEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []tabKey
	var ents []*tabEntry
	for k, es := range t.m {
		for _, e := range es {
			keys, ents = append(keys, k), append(ents, e)
		}
	}
	return keys, ents
}

// tabNow is the time of the fallback's decisions, which the tab records:
// Options.Clock's when set (the store's own fallback runs on it),
// otherwise the wall clock's.
func (s *Store) tabNow() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

// tabTime is the time (ns) of the units of d, a decision of the fallback:
// its time, or a reservation's, or tabNow for a fallback that tells none.
func (s *Store) tabTime(d sluice.Decision) int64 {
	if d.Time.IsZero() {
		return s.tabNow()
	}
	return d.Time.Add(d.Delay).UnixNano()
}

// settled charges to Redis what the tab holds for key under p's name, if
// anything, before a decision on the key goes to Redis. An error is a
// failure of Redis (or the caller's end), for the decision's OnError path.
func (s *Store) settled(ctx context.Context, p *sluice.Policy, key string) error {
	if s.tab.pending.Load() == 0 {
		return nil
	}
	return s.settle(ctx, p, key)
}

func (s *Store) settle(ctx context.Context, p *sluice.Policy, key string) error {
	k := tabKey{p.Name(), key}
	s.tab.mu.Lock()
	ents := slices.Clone(s.tab.m[k])
	s.tab.mu.Unlock()
	for _, e := range ents {
		if err := s.charge(ctx, k, e); err != nil {
			return err
		}
	}
	return nil
}

// charge charges e to Redis and takes it out of the tab; on an error it
// stays, to be charged later.
func (s *Store) charge(ctx context.Context, k tabKey, e *tabEntry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil
	}
	if charges, some := e.charges(s.tabNow()); some {
		if !s.admit() {
			return ErrCircuitOpen
		}
		c, nl := e.c, len(e.c.suffixes)
		args := make([]string, 0, 5+len(c.args)+nl)
		args = append(args, "charge", "0", s.scriptNow(), "0", strconv.Itoa(nl))
		args = append(args, s.limitArgs(c)...)
		args = append(args, charges...)
		// sluice.lua serves every policy; a penalty's record is not
		// charged.
		keys := s.keys(c, e.p, k.key)[:2*nl]
		var rb [2]int64
		if _, err := s.exec(ctx, wideScript, "charge", keys, args, rb[:0], 2); err != nil {
			return err
		}
	}
	e.gone = true
	s.tab.remove(k, e)
	return nil
}

// settleAll charges every entry of the tab, until one fails.
func (s *Store) settleAll() {
	keys, ents := s.tab.snapshot()
	for i, e := range ents {
		if err := s.charge(context.Background(), keys[i], e); err != nil {
			return
		}
	}
}

// startSettling starts charging the tab in the background, unless that
// runs already: a call of Redis has just succeeded while the tab holds
// something. Calls go through Store.settleSoon.
func (s *Store) startSettling() {
	if !s.tab.settling.CompareAndSwap(false, true) {
		return
	}
	s.bg.Lock()
	defer s.bg.Unlock()
	if s.bg.closed {
		s.tab.settling.Store(false)
		return
	}
	s.bg.wg.Go(func() {
		s.settleAll()
		s.tab.settling.Store(false)
	})
}

// mirror charges the fallback with n units that Redis has just admitted
// for key under p in exact mode, so that the fallback, if Redis fails,
// starts from everything this process admitted. Its answer is not needed.
func (s *Store) mirror(ctx context.Context, p *sluice.Policy, key string, n int64) {
	if s.onError == Local {
		s.fallback.Take(ctx, p, key, n)
	}
}

// mirrorState sets the fallback's state of key under p, a policy of one
// limit in lease or async mode, to what a call of Redis has just answered,
// remaining units left (rounded down, for a bucket), so that the fallback,
// if Redis fails, starts from Redis's count (refilling from now, for a
// bucket) rather than from what this process admitted.
func (s *Store) mirrorState(ctx context.Context, p *sluice.Policy, key string, remaining int64) {
	if s.onError != Local {
		return
	}
	burst := storekit.Of(p).Rule(0).Burst() // a window's Count
	if s.fallback.Reset(ctx, p, key) == nil && remaining < burst {
		s.fallback.Take(ctx, p, key, min(burst-max(remaining, 0), burst))
	}
}

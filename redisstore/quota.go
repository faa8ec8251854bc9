package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// Quota leases and async counts: the store's side of sluice.SyncLease and
// sluice.SyncAsync (not to be confused with concurrency leases, lease.go).
//
// # Quota leases (sluice.SyncLease)
//
// A process that sees a key hot (at least Options.LeaseRate decisions per
// second for it, locally) takes a lease of part of its quota from Redis in
// one call of quota.lua, spends it locally, and gives back what it did not
// spend in the call that takes its next lease (or on Close). A key that is
// not hot is decided as in exact mode (plain.lua, its calls shared with
// other requests by the coalescer): no lease, no record.
//
// A lease of a fixed_window limit is a slice of the current window's
// count: charged to the window when taken, it ends with the window (or
// after Options.LeaseTTL, if sooner), and its unused units are taken off
// the window's count when returned in the same window. The count never
// exceeds the limit, so no window ever admits more than Count.
//
// A lease of a token_bucket or gcra limit is tokens taken now, recorded in
// Redis with its expiry (the time to live, Options.LeaseTTL). While
// recorded, the bucket's debt never falls below the units of the leases
// recorded: the tokens in the bucket plus the unused tokens held in leases
// never exceed Burst, and refill at no more than the rate, so that the
// requests admitted across all processes in any interval of length t are
// at most Burst + rate×t, exactly what one bucket admits. A returned
// lease gives back its unused tokens (algo.Rule.Refund's arithmetic); a
// lease that is not returned (its process crashed) expires after its time
// to live, and its tokens then count as spent as of the next call on the
// key, which drops the record: the bucket refills from there.
//
// A process spends a lease only until shortly before Redis's expiry of it
// (measured from when it sent the call, less a margin of 1ms and 1% of the
// time to live), so that no unit is spent after Redis has let it go.
//
// The cost of leasing: a request may be refused while other processes hold
// unused leased units. Each lease is at most Options.LeaseFraction of the
// limit's Burst (Count for a window), so the units that can be refused
// this way are at most processes × LeaseFraction × Burst at any moment;
// Store.QuotaStats reports this process's share (LeasedUnused).
//
// # Async counts (sluice.SyncAsync)
//
// A process decides every request on a key locally against its view of
// the key's remaining units, and every Sync.Interval sends the units it
// admitted since (in one quota.lua call that charges them to the key
// unconditionally), receiving the remaining units back as its new view.
// The first decision on a key in a process is a plain decision in Redis,
// which also sets the view. A fixed window's view holds the window Redis
// was in at the last sync, to its end as placed on the local clock from the
// time the sync was sent (never late); the first decision after that end
// syncs before it decides, so no unit is admitted for a window Redis has
// not reached. See docs/hot-keys.md, "Async mode", for the bound.
//
// # Failures
//
// When Redis fails, a lease in hand is still spent, until it runs out or
// expires; then decisions take the OnError path as any other. A lease
// whose return was sent in a call that failed is never spent again: it
// may have been returned. Async views keep deciding until their next sync
// fails; then the key's decisions take the OnError path until a sync
// succeeds. With OnError Local, the fallback starts from Redis's count at
// the key's last call (each grant and sync sets the key's state in the
// fallback to it), plus the units an async view admitted since; what it
// admits is charged to Redis when Redis returns (see fallback.go).
//
// Quota leases apply to policies of one limit in plain arithmetic
// (nearly all real rules); other policies are decided exactly, whatever
// their mode.
//
// # Processes in different modes
//
// Processes sharing a policy through one Redis may decide it in different
// modes for a while (a fleet mid-rollout, or mid-reload). Exact and lease
// mix safely, never exceeding the limit: a fixed window's leased units are
// in the window's count, which exact decisions read; an exact decision on
// a bucket (plain.lua, and its penalty form) holds the debt at the units
// of the lease records, as quota.lua does (a lease expired unreturned
// counts as spent in full as of the next decision, which drops its
// record), at the cost of one EXISTS per bucket limit per decision when
// the key has no record. A process in
// async mode sends its units late whatever the others' modes, so a mix
// that includes it keeps the async bound, with every process counted in
// it.

var (
	quotaLua    = script("quota.lua", "")
	quotaScript = rueidis.NewLuaScript(quotaLua)
)

// QuotaStats counts the work of quota leases and async counts in one
// store since it was built.
type QuotaStats struct {
	// Local is how many decisions were made without calling Redis: from
	// a lease in hand, or from an async view.
	Local int64
	// Calls is how many decisions went to Redis: calls of the quota
	// script (grants, returns and syncs, including those that failed),
	// and requests on keys too cold to lease, decided as in exact mode
	// (where concurrent ones may share a script call).
	Calls int64
	// Leases is how many leases were granted.
	Leases int64
	// LeasedUnused is how many units this store holds now in live leases
	// it has not spent: the units that other processes' clients may be
	// refused while they are held. A lease that has ended (its time to
	// live, or its window, is over) counts no more, whether or not its key
	// has seen a decision since.
	LeasedUnused int64
}

// QuotaStats returns the store's counts of quota-lease and async work.
// Calls per decision on a hot key is Calls / (Local + Calls), roughly.
// It visits the keys holding a lease (the hot keys), to let go of those
// that have ended. It is safe for concurrent use.
func (s *Store) QuotaStats() QuotaStats {
	q := &s.quota
	q.lapse(s.quotaNow())
	return QuotaStats{Local: q.local.Load(), Calls: q.calls.Load(), Leases: q.leases.Load(), LeasedUnused: q.unused.Load()}
}

// lapse takes the unused units of the leases that have ended by now off
// the count of units held (unused): such a lease is never spent, though
// its record stays until its key's next lease or Close returns it (a
// bucket's may still be live in Redis for the margin, and be refunded).
// An entry busy with a decision is left to it. The entries of a policy
// rebuilt (a reload) whose lease was not handed over are visited too.
func (q *quotas) lapse(now int64) {
	q.mu.Lock()
	ents := make([]*quotaEntry, 0, len(q.leased))
	for e := range q.leased {
		ents = append(ents, e)
	}
	q.mu.Unlock()
	for _, e := range ents {
		if !e.mu.TryLock() {
			continue
		}
		if e.listed && now >= e.until {
			if !e.lapsed {
				q.unused.Add(-e.units)
				e.lapsed = true
			}
			e.unlist(q)
		}
		e.mu.Unlock()
	}
}

// quotas is the store's table of keys decided in lease or async mode.
type quotas struct {
	now      func() int64 // Store.quotaNow
	rate     int64        // Options.LeaseRate
	fraction float64      // Options.LeaseFraction
	ttl      int64        // Options.LeaseTTL, ns
	idPrefix string       // unique to the store: lease ids are idPrefix + a counter

	nextID                       atomic.Int64
	local, calls, leases, unused atomic.Int64

	mu      sync.RWMutex
	m       map[quotaKey]*quotaEntry
	sweepAt int                      // the size of m at which entry sweeps it
	async   map[quotaKey]*quotaEntry // the entries in async mode, which the flusher visits
	leased  map[*quotaEntry]struct{} // the entries granted a lease with units to spare, which lapse visits
	// The flusher: started by the first async entry, stopped by Close.
	flushing bool
	stop     chan struct{}
	done     sync.WaitGroup
}

type quotaKey struct {
	name, key string
}

// quotaEntry is one key's lease or async view in this process. Its fields
// are guarded by mu, which a decision holds while it calls Redis for a
// lease, so that concurrent decisions on a key wait for one call rather
// than each make one.
type quotaEntry struct {
	mu   sync.Mutex
	c    *compiled
	p    *sluice.Policy
	dead atomic.Bool // removed from the table: look the key up again

	// The rate of decisions, per second: the count of the second that
	// began at sec (local ns), and of the one before.
	sec, cur, prev int64

	// The lease in hand: units unused (and granted), its id (for a window,
	// the window's start in µs), and the local time it ends.
	units, granted int64
	id             string
	until          int64
	// The entry is in quotas.leased; the lease has ended and its units are
	// no longer counted in quotas.unused (lapse).
	listed, lapsed bool
	// From Redis's last answer: remaining units there, reset (ns) and the
	// local time of the answer.
	remaining, reset, at int64

	// Async: a view is set; the units admitted locally and not yet sent
	// (for a window: in the window starting at window µs, server time, and
	// ending at local ns windowEnd); the next sync's local time; a sync is
	// in flight; its failure.
	viewed     bool
	pending    int64
	window     int64
	windowEnd  int64
	nextSync   int64
	syncing    bool
	syncFailed bool
	// The fallback has been given the units pending since the last sync,
	// which failed.
	pendingFellBack bool
}

func (q *quotas) init(opts Options) {
	q.rate, q.fraction, q.ttl = int64(opts.LeaseRate), opts.LeaseFraction, int64(opts.LeaseTTL)
	if q.rate <= 0 {
		q.rate = 50
	}
	if q.fraction <= 0 || q.fraction > 1 {
		q.fraction = 0.05
	}
	if q.ttl <= 0 {
		q.ttl = int64(time.Second)
	}
	q.idPrefix = strconv.FormatUint(rand.Uint64(), 36) + "."
	q.m = make(map[quotaKey]*quotaEntry)
	q.sweepAt = 4096
	q.async = make(map[quotaKey]*quotaEntry)
	q.leased = make(map[*quotaEntry]struct{})
	q.stop = make(chan struct{})
}

// quotaMode returns the sync mode c is decided in: SyncExact for policies
// the quota script does not run.
func quotaMode(p *sluice.Policy, c *compiled) sluice.SyncMode {
	if c.quotaArgs == nil {
		return sluice.SyncExact
	}
	return p.Sync().Mode
}

// quotaArgs returns the quota script's limit arguments for p, or nil if
// leases and async counts cannot apply to it: more than one limit, wide
// arithmetic, or a limit other than a bucket or a fixed window.
func quotaArgs(p *sluice.Policy, c *compiled) []string {
	if p.Sync().Mode == sluice.SyncExact || p.Len() != 1 || c.script != plainScript {
		return nil
	}
	switch storekit.Of(p).Rule(0).Algorithm() {
	case algo.TokenBucket, algo.GCRA, algo.FixedWindow:
	default:
		return nil
	}
	// c.args holds alg, count, period, burst, l, p, wide, def.
	a := c.args
	return []string{a[0], a[1], a[2], a[3], a[4], a[5], a[7]}
}

// monoBase anchors the local monotonic time of leases.
var monoBase = time.Now()

// quotaNow is the local time leases and views run on, in ns: Options.Clock
// when set, otherwise the monotonic clock (not the coarse one, whose lag
// could spend a lease late).
func (s *Store) quotaNow() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixNano()
	}
	return int64(time.Since(monoBase))
}

// quotaTime is the time of a local decision made at now (quotaNow): the
// Clock's, or the wall clock's (coarse: a decision's time is informative).
func (s *Store) quotaTime(now int64) time.Time {
	if s.clock != nil {
		return time.Unix(0, now)
	}
	return s.mono.Now()
}

// entry returns key's entry under p, locked. The caller reads the time
// once it holds the entry: a decision that waited for the entry while
// another called Redis is made when it gets it, not when it arrived.
func (q *quotas) entry(p *sluice.Policy, c *compiled, key string) *quotaEntry {
	k := quotaKey{p.Name(), key}
	for {
		q.mu.RLock()
		e := q.m[k]
		q.mu.RUnlock()
		if e != nil && e.c == c {
			e.mu.Lock()
			if !e.dead.Load() {
				return e
			}
			e.mu.Unlock()
		}
		q.mu.Lock()
		e = q.m[k]
		if e == nil || e.c != c || e.dead.Load() {
			// A new key, or a policy rebuilt (a reload): a lease taken
			// under the old one is left to expire.
			if len(q.m) >= q.sweepAt {
				q.sweep(q.now())
			}
			old := e
			e = &quotaEntry{c: c, p: p}
			if old != nil {
				old.dead.Store(true)
				if old.handOver(e) && e.listed {
					delete(q.leased, old)
					q.leased[e] = struct{}{}
				}
			}
			q.m[k] = e
		}
		q.mu.Unlock()
		e.mu.Lock()
		if !e.dead.Load() {
			return e
		}
		e.mu.Unlock()
	}
}

// handOver gives the lease of old, an entry of a policy rebuilt (a
// reload), to e, its successor, if old is not in use (true): to be spent on if
// the limit's definition is unchanged, otherwise only returned with e's
// first lease. An entry in use keeps its lease, which then expires.
func (old *quotaEntry) handOver(e *quotaEntry) bool {
	if !old.mu.TryLock() {
		return false
	}
	defer old.mu.Unlock()
	e.id, e.units, e.granted, e.until = old.id, old.units, old.granted, old.until
	e.listed, e.lapsed = old.listed, old.lapsed
	e.remaining, e.reset, e.at = old.remaining, old.reset, old.at
	if !slices.Equal(old.c.quotaArgs, e.c.quotaArgs) {
		e.until = 0
	}
	old.id, old.units, old.granted, old.until = "", 0, 0, 0
	old.listed, old.lapsed = false, false
	return true
}

// forget drops key's entry under p (for Reset): its lease is not
// returned, its async view and unsent units are dropped.
func (q *quotas) forget(p *sluice.Policy, key string) {
	k := quotaKey{p.Name(), key}
	q.mu.Lock()
	e := q.m[k]
	delete(q.m, k)
	delete(q.async, k)
	q.mu.Unlock()
	if e != nil {
		e.dead.Store(true)
		e.mu.Lock()
		e.drop(q)
		e.mu.Unlock()
	}
}

// sweep forgets the entries that hold nothing (no lease, no async view)
// and have seen no decision for two seconds, so that the cold keys of a
// policy in lease mode do not accumulate; the caller holds q.mu.
func (q *quotas) sweep(now int64) {
	for k, e := range q.m {
		if !e.mu.TryLock() {
			continue
		}
		if e.units == 0 && !e.viewed && now-e.sec > 2*int64(time.Second) {
			e.dead.Store(true)
			delete(q.m, k)
		}
		e.mu.Unlock()
	}
	q.sweepAt = max(2*len(q.m), 4096)
}

// count records a decision at now and returns the rate: the most decisions
// in this second so far or in the last.
func (e *quotaEntry) count(now int64) int64 {
	const sec = int64(time.Second)
	switch {
	case now >= e.sec+2*sec || now < e.sec:
		e.sec, e.cur, e.prev = now-now%sec, 0, 0
	case now >= e.sec+sec:
		e.sec, e.prev, e.cur = e.sec+sec, e.cur, 0
	}
	e.cur++
	return max(e.cur, e.prev)
}

// quotaReply is quota.lua's reply.
type quotaReply struct {
	now, granted, remaining, retry, reset, ends int64
}

// quotaCall runs quota.lua for key.
func (s *Store) quotaCall(ctx context.Context, c *compiled, p *sluice.Policy, key, op string, want, need, life int64, id, retID string, retUnits int64, window string) (quotaReply, error) {
	s.quota.calls.Add(1)
	if !s.admit() {
		return quotaReply{}, ErrCircuitOpen
	}
	var kb [4]string
	keys := s.appendKeys(kb[:0], c, p, key)
	keys = append(keys[:2:2], keys[0]+":g")
	args := make([]string, 0, 16)
	args = append(args, op, s.scriptNow())
	args = append(args, c.quotaArgs...)
	args = append(args, strconv.FormatInt(want, 10), strconv.FormatInt(need, 10), strconv.FormatInt(life/int64(time.Microsecond), 10),
		id, retID, strconv.FormatInt(retUnits, 10), window)
	var rb [6]int64
	res, err := s.exec(ctx, quotaScript, "quota "+op, keys, args, rb[:0], 6)
	if err != nil {
		return quotaReply{}, err
	}
	return quotaReply{res[0], res[1], res[2], res[3], res[4], res[5]}, nil
}

// leaseSize returns the units to ask for on a key of rule r seen at rate
// decisions per second, for a request of cost n: enough for about a
// quarter of the lease's time to live, at most LeaseFraction of the
// limit; 0 when the key is not hot or a lease would be too small to pay.
func (q *quotas) leaseSize(r *algo.Rule, rate, n int64) int64 {
	if rate < q.rate {
		return 0
	}
	most := int64(float64(r.Burst()) * q.fraction)
	if most < 2 || most < n {
		return 0
	}
	want := int64(float64(rate) * float64(q.ttl/4) / float64(time.Second))
	return min(max(want, n, 2), most)
}

// leaseMargin is how long before Redis's expiry of a lease of time to live
// life (ns) a process stops spending it.
func leaseMargin(life int64) int64 { return int64(time.Millisecond) + life/100 }

// takeLeased decides a request of cost n for key under p, in lease mode.
func (s *Store) takeLeased(ctx context.Context, c *compiled, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	q := &s.quota
	e := q.entry(p, c, key)
	now := s.quotaNow()
	rate := e.count(now)
	if e.units >= n && now < e.until && !e.lapsed {
		e.units -= n
		q.unused.Add(-n)
		d := e.local(p, now, s.quotaTime(now))
		e.mu.Unlock()
		q.local.Add(1)
		return d, nil
	}
	r := storekit.Of(p).Rule(0)
	want, life := q.leaseSize(r, rate, n), q.ttl
	if want == 0 && e.id == "" {
		// Not hot, and no lease in hand to give back: the request is
		// decided as in exact mode, which is what quota.lua would do, but
		// without holding the entry through the call, so that concurrent
		// requests for the key do not queue behind one another, and with
		// the coalescer gathering them into shared calls.
		e.mu.Unlock()
		q.calls.Add(1)
		return s.takeExact(ctx, c, p, key, n)
	}
	defer e.mu.Unlock()
	if s.deny != nil && n == 1 {
		// A key Redis has just denied, as in exact mode.
		if d, ok := s.deny.get(s.deny.id(c.slots, key), s.localNow(), n); ok {
			return s.cached(d), nil
		}
	}
	// A new lease, or a plain decision that returns the lease in hand in
	// the same call.
	if want == 0 {
		want, life = n, 0
	}
	retID, ret := e.drop(q)
	var id string
	if life > 0 {
		id = q.idPrefix + strconv.FormatInt(q.nextID.Add(1), 36)
	}
	err := s.settled(ctx, p, key)
	var rep quotaReply
	if err == nil {
		rep, err = s.quotaCall(ctx, c, p, key, "grant", want, n, life, id, retID, ret, "")
	}
	if err != nil {
		return s.degrade(ctx, c, p, key, n, err, func(f sluice.Store) (sluice.Decision, error) { return f.Take(ctx, p, key, n) })
	}
	const us = int64(time.Microsecond)
	e.remaining, e.reset, e.at = rep.remaining, rep.reset*us, now
	s.mirrorState(ctx, p, key, rep.remaining)
	if rep.granted == 0 {
		d := storekit.Of(p).Decision(0, algo.Status{Remaining: rep.remaining, RetryAfter: rep.retry * us, ResetAfter: rep.reset * us}, rep.now*us)
		if s.deny != nil {
			s.remember(s.deny.id(c.slots, key), n, d)
		}
		return d, nil
	}
	if life > 0 {
		// The lease, even if spent in full by this request: its record is
		// dropped when the next lease is taken.
		q.leases.Add(1)
		e.granted, e.units = rep.granted, rep.granted-n
		e.id = id
		if r.Algorithm() == algo.FixedWindow {
			// A window's lease is returned by its window's start.
			e.id = strconv.FormatInt(windowStart(rep.now, int64(r.Period())/us), 10)
		}
		e.until = now + (rep.ends-rep.now)*us - leaseMargin(life)
		q.unused.Add(e.units)
		if e.units > 0 {
			e.listed = true
			q.mu.Lock()
			q.leased[e] = struct{}{}
			q.mu.Unlock()
		}
	}
	return e.local(p, now, s.quotaTime(now)), nil
}

// windowStart returns the start of the window of length period that holds
// at (both µs).
func windowStart(at, period int64) int64 { return at - at%period }

// drop gives up the lease in hand: it returns the id and unused units to
// send back to Redis, and forgets them locally, whether or not the call
// that returns them succeeds. A bucket's lease spent in full is returned
// too (0 units), so that its record stops holding the bucket's debt.
func (e *quotaEntry) drop(q *quotas) (string, int64) {
	id, units := e.id, e.units
	if e.units > 0 && !e.lapsed {
		q.unused.Add(-e.units)
	}
	e.unlist(q)
	e.id, e.units, e.granted, e.until = "", 0, 0, 0
	e.listed, e.lapsed = false, false
	return id, units
}

// unlist takes e out of q.leased; the caller holds e.mu.
func (e *quotaEntry) unlist(q *quotas) {
	if !e.listed {
		return
	}
	e.listed = false
	q.mu.Lock()
	delete(q.leased, e)
	q.mu.Unlock()
}

// local is the Decision for a request just admitted from the lease: the
// units left are Redis's remaining as of the lease, plus the lease's.
func (e *quotaEntry) local(p *sluice.Policy, now int64, wall time.Time) sluice.Decision {
	return sluice.Decision{
		Allowed:    true,
		Limit:      storekit.Of(p).Rule(0).Burst(),
		Remaining:  e.remaining + e.units,
		ResetAfter: time.Duration(max(e.reset-(now-e.at), 0)),
		Time:       wall,
	}
}

// snapshot returns the keys and entries of m, one of q's tables, read
// under q.mu, so that the caller can visit them without holding it.
func (q *quotas) snapshot(m map[quotaKey]*quotaEntry) ([]quotaKey, []*quotaEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := make([]quotaKey, 0, len(m))
	ents := make([]*quotaEntry, 0, len(m))
	for k, e := range m {
		keys = append(keys, k)
		ents = append(ents, e)
	}
	return keys, ents
}

// returnLeases gives every lease in hand back to Redis, for Close: one
// call per leased key, each bounded by the store's Timeout.
func (s *Store) returnLeases() {
	q := &s.quota
	keys, ents := q.snapshot(q.m)
	for i, e := range ents {
		e.mu.Lock()
		retID, ret := e.drop(q)
		if retID != "" && ret > 0 {
			if _, err := s.quotaCall(context.Background(), e.c, e.p, keys[i].key, "return", 0, 0, 0, "", retID, ret, ""); err != nil && s.onFailure != nil {
				s.onFailure(fmt.Errorf("redisstore: returning a quota lease on close: %w", err))
			}
		}
		e.mu.Unlock()
	}
}

// takeAsync decides a request of cost n for key under p, in async mode:
// locally, against the key's view, which a sync refreshes every interval.
func (s *Store) takeAsync(ctx context.Context, c *compiled, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	q := &s.quota
	e := q.entry(p, c, key)
	defer e.mu.Unlock()
	now := s.quotaNow()
	e.count(now)
	if !e.viewed {
		s.quota.watch(s, quotaKey{p.Name(), key}, e)
	}
	r := storekit.Of(p).Rule(0)
	window := r.Algorithm() == algo.FixedWindow
	// A window's view ends with its window, as the last sync placed it on
	// the local clock (never late): the first decision after it syncs, so
	// that a view never admits units for a window Redis has not reached,
	// and syncs again if the window ended while it synced.
	synced := false
	for tries := 0; tries < 2 && (!e.viewed || e.syncFailed || now >= e.nextSync || window && now >= e.windowEnd); tries++ {
		if err := s.sync(ctx, e, key, now); err != nil {
			if !e.pendingFellBack && e.pending > 0 && s.onError == Local {
				// The fallback holds Redis's count as of the last sync
				// (mirrorState); the units admitted since are the rest.
				e.pendingFellBack = true
				s.fallback.Take(ctx, p, key, e.pending)
			}
			return s.degrade(ctx, c, p, key, n, err, func(f sluice.Store) (sluice.Decision, error) { return f.Take(ctx, p, key, n) })
		}
		synced, now = true, s.quotaNow()
	}
	if !synced {
		q.local.Add(1)
	}
	avail := e.remaining - e.pending
	d := sluice.Decision{Limit: r.Burst(), Time: s.quotaTime(now)}
	if avail >= n {
		e.pending += n
		d.Allowed, d.Remaining = true, avail-n
		d.ResetAfter = time.Duration(max(e.reset-(now-e.at), 0))
		return d, nil
	}
	d.Remaining = max(avail, 0)
	if window {
		d.RetryAfter = time.Duration(max(e.windowEnd-now, 1))
	} else {
		// The time the missing tokens take to refill, and at least until
		// the next sync, which will see them.
		missing := n - max(avail, 0)
		refill := (missing*int64(r.Period()) + r.Count() - 1) / r.Count()
		d.RetryAfter = time.Duration(max(refill, e.nextSync-now, 1))
	}
	d.ResetAfter = max(d.RetryAfter, time.Duration(e.reset-(now-e.at)))
	return d, nil
}

// sync sends e's pending units to Redis and refreshes its view, at local
// time now; the caller holds e.mu. On failure the pending units are kept,
// to be sent again: a charge counted twice makes Redis stricter, never
// looser.
func (s *Store) sync(ctx context.Context, e *quotaEntry, key string, now int64) error {
	const us = int64(time.Microsecond)
	r := storekit.Of(e.p).Rule(0)
	window := ""
	if r.Algorithm() == algo.FixedWindow && e.viewed {
		window = strconv.FormatInt(e.window, 10)
	}
	sent := e.pending
	if window == "" && r.Algorithm() == algo.FixedWindow {
		sent = 0
	}
	err := s.settled(ctx, e.p, key)
	var rep quotaReply
	if err == nil {
		rep, err = s.quotaCall(ctx, e.c, e.p, key, "sync", sent, 0, 0, "", "", 0, window)
	}
	if err != nil {
		e.syncFailed = true
		return err
	}
	e.viewed, e.syncFailed, e.pendingFellBack = true, false, false
	e.pending -= sent
	e.remaining, e.reset, e.at = rep.remaining, rep.reset*us, now
	s.mirrorState(ctx, e.p, key, rep.remaining)
	e.nextSync = now + int64(e.p.Sync().Interval)
	if r.Algorithm() == algo.FixedWindow {
		period := int64(r.Period()) / us
		start := windowStart(rep.now, period)
		if start != e.window {
			e.pending = 0 // units of an earlier window, which Redis dropped
		}
		e.window = start
		e.windowEnd = now + (start+period-rep.now)*us
	}
	return nil
}

// watch adds e, a key in async mode, to the keys the flusher visits, and
// starts the flusher if it is not running.
func (q *quotas) watch(s *Store, k quotaKey, e *quotaEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.async[k] = e
	if q.flushing {
		return
	}
	q.flushing = true
	q.done.Add(1)
	go func() {
		defer q.done.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-q.stop:
				return
			case <-t.C:
				s.flush(false)
			}
		}
	}()
}

// flush sends the pending units of every async key whose sync is due (all
// of them, with all), so that units admitted on a key that has gone quiet
// still reach Redis within about one interval; it forgets keys that have
// been idle, with nothing pending, for ten intervals.
func (s *Store) flush(all bool) {
	q := &s.quota
	keys, ents := q.snapshot(q.async)
	for i, e := range ents {
		e.mu.Lock()
		now := s.quotaNow()
		switch {
		case e.pending > 0 && (all || now >= e.nextSync):
			if err := s.sync(context.Background(), e, keys[i].key, now); err != nil && s.onFailure != nil {
				s.onFailure(err)
			}
		case e.pending == 0 && !all && now-e.at > 10*int64(e.p.Sync().Interval):
			e.dead.Store(true)
			q.mu.Lock()
			delete(q.async, keys[i])
			if q.m[keys[i]] == e {
				delete(q.m, keys[i])
			}
			q.mu.Unlock()
		}
		e.mu.Unlock()
	}
}

// SyncNow sends every key's units admitted in async mode and not yet sent
// to Redis now, without waiting for their interval; Close does so too.
// For tests and orderly shutdown.
func (s *Store) SyncNow() { s.flush(true) }

// closeQuotas stops the flusher, sends what async keys have pending, and
// returns every quota lease in hand.
func (s *Store) closeQuotas() {
	q := &s.quota
	q.mu.Lock()
	if q.stop != nil {
		select {
		case <-q.stop:
		default:
			close(q.stop)
		}
	}
	q.mu.Unlock()
	q.done.Wait()
	s.flush(true)
	s.returnLeases()
}

// peekLocal answers Peek from the lease or async view in hand for key
// under p, if there is one: true and the status of one unit. Without one
// (false), Peek asks Redis, which for a bucket does not count other
// processes' leases and so may report more units than a take would get.
func (s *Store) peekLocal(p *sluice.Policy, c *compiled, key string) (sluice.Decision, bool) {
	q := &s.quota
	q.mu.Lock()
	e := q.m[quotaKey{p.Name(), key}]
	q.mu.Unlock()
	if e == nil {
		return sluice.Decision{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.quotaNow()
	if e.dead.Load() || e.c != c {
		return sluice.Decision{}, false
	}
	switch {
	case e.units > 0 && now < e.until && !e.lapsed:
		return e.local(p, now, s.quotaTime(now)), true
	case e.viewed && !e.syncFailed && now < e.nextSync && (storekit.Of(p).Rule(0).Algorithm() != algo.FixedWindow || now < e.windowEnd):
		avail := e.remaining - e.pending
		d := sluice.Decision{Allowed: avail > 0, Limit: storekit.Of(p).Rule(0).Burst(), Remaining: max(avail, 0), Time: s.quotaTime(now),
			ResetAfter: time.Duration(max(e.reset-(now-e.at), 0))}
		if !d.Allowed {
			d.RetryAfter = time.Duration(e.nextSync - now)
		}
		return d, true
	}
	return sluice.Decision{}, false
}

// reserveQuota is Reserve for a policy in lease or async mode (of bucket
// limits): decided in Redis, minding the lease records, as a take is.
func (s *Store) reserveQuota(ctx context.Context, c *compiled, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	const us = int64(time.Microsecond)
	err := s.settled(ctx, p, key)
	var rep quotaReply
	if err == nil {
		rep, err = s.quotaCall(ctx, c, p, key, "reserve", n, int64(maxWait)/us, 0, "", "", 0, "")
	}
	if err != nil {
		return s.degrade(ctx, c, p, key, n, err, func(f sluice.Store) (sluice.Decision, error) { return f.Reserve(ctx, p, key, n, maxWait) })
	}
	s.mirrorState(ctx, p, key, rep.remaining)
	wait := time.Duration(rep.retry * us)
	d := storekit.Of(p).Decision(0, algo.Status{Allowed: rep.granted > 0, Remaining: rep.remaining, ResetAfter: rep.reset * us}, rep.now*us)
	if rep.granted == 0 {
		d.RetryAfter = wait
		return d, nil
	}
	d.Delay = wait
	return d, nil
}

package memstore

import "time"

func (s *Store) janitor(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep runs one expiry pass and returns the number of entries removed. In
// each shard it examines the next sweepSlots slots after where the last pass
// stopped, so that repeated passes cover every entry, and removes the
// expired ones; sliding_log entries are sampled. A shard's lock is held for
// one shard's pass only, and a shard that holds less than an eighth of its
// table is shrunk so that its memory is returned. The janitor calls Sweep
// every SweepInterval.
//
// Each shard's pass reads the clock under the shard's lock. With a clock
// that can step back (a wall clock; the default clock cannot), a reading
// taken before the pass could be later than a decision made meanwhile, and
// the pass would remove state that the decision left live.
func (s *Store) Sweep() int {
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.tab.used > 0 || len(sh.logs) > 0 {
			removed += sh.sweep(s.sec(s.now(), false))
		} else {
			// Nothing can expire: leave the clock unread, so that an idle
			// store lets the default clock's goroutine stop.
			sh.compact()
		}
		sh.mu.Unlock()
	}
	return removed
}

const (
	sweepSlots  = 4096
	sweepSample = 64
)

func (sh *shard) sweep(now uint32) int {
	removed := 0
	t := &sh.tab
	i := sh.cursor
	if i >= uint64(len(t.slots)) {
		i = 0
	}
	for n := min(sweepSlots, len(t.slots)); n > 0; {
		if e := &t.slots[i]; e.a != 0 && e.exp <= now {
			// remove shifts a later entry into i: look at i again, without
			// counting it as another slot, so that a pass covers its whole
			// stretch however many entries it removes.
			t.remove(i)
			removed++
			continue
		}
		i = t.next(i)
		n--
	}
	sh.cursor = i
	looked := 0
	for k, lc := range sh.logs {
		if lc.exp <= now {
			delete(sh.logs, k)
			removed++
		}
		if looked++; looked >= sweepSample {
			break
		}
	}
	sh.compact()
	return removed
}

// compact returns memory once a shard has shrunk to an eighth of its table,
// and its sliding_log map to a quarter of its peak.
func (sh *shard) compact() {
	t := &sh.tab
	if len(t.slots) > minSlots && t.used*8 < len(t.slots) {
		t.resize(max(minSlots, 2*t.used))
		sh.cursor = 0
	}
	if len(sh.logs) < sh.peak/4 && sh.peak > 1024 {
		sh.logs = shrink(sh.logs)
		sh.peak = len(sh.logs)
	}
}

// shrink copies m into a map sized for its contents; maps.Clone would keep
// the old table's size.
func shrink[V any](m map[id]V) map[id]V {
	out := make(map[id]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

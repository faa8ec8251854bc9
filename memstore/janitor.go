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
// each shard it looks at samples of entries and removes the expired ones,
// sampling again while at least a quarter of a sample had expired, up to
// sweepRounds samples; a shard's lock is held for one shard's pass only. A
// shard that holds less than a quarter of its peak is rebuilt so that its
// memory is returned. The janitor calls Sweep every SweepInterval.
func (s *Store) Sweep() int {
	now := s.sec(s.now(), false)
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		removed += sh.sweep(now)
		sh.mu.Unlock()
	}
	return removed
}

const (
	sweepSample = 32
	sweepRounds = 16
	// shrinkFloor is the peak below which a shard is never rebuilt.
	shrinkFloor = 1024
)

func (sh *shard) sweep(now uint32) int {
	removed := 0
	for range sweepRounds {
		looked, expired := 0, 0
		for k, c := range sh.cells {
			if c.exp <= now {
				delete(sh.cells, k)
				expired++
			}
			if looked++; looked >= sweepSample {
				break
			}
		}
		for k, lc := range sh.logs {
			if lc.exp <= now {
				delete(sh.logs, k)
				expired++
			}
			if looked++; looked >= 2*sweepSample {
				break
			}
		}
		removed += expired
		if looked == 0 || expired*4 < looked {
			break
		}
	}
	// Go maps keep their memory after deletions: rebuild a shard that
	// has shrunk to a quarter of its peak.
	if n := len(sh.cells) + len(sh.logs); sh.peak > shrinkFloor && n*4 < sh.peak {
		sh.cells = shrink(sh.cells)
		sh.logs = shrink(sh.logs)
		sh.peak = n
	}
	return removed
}

// shrink copies m into a map sized for its contents; maps.Clone would keep
// the old table's size.
func shrink[V any](m map[cellKey]V) map[cellKey]V {
	out := make(map[cellKey]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

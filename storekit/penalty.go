package storekit

import (
	"time"

	"github.com/sluicehq/sluice"
)

// PenaltyState is a key's penalty record (see sluice.Penalty): the block's
// end and the last strike (Unix nanoseconds, zero for none), the offences
// and the strikes of the current offence window. A store keeps one per key
// of a penalized policy, under the policy's name (Policy.PenaltySlot in
// process), and decides it with the request, atomically.
type PenaltyState struct {
	Until, Last       int64
	Offences, Strikes int64
}

// Blocked reports whether the key is blocked at time now and, if so, how
// long the block still holds.
func (ps PenaltyState) Blocked(now int64) (time.Duration, bool) {
	if now < ps.Until {
		return time.Duration(ps.Until - now), true
	}
	return 0, false
}

// Expiry returns the time from which the record is forgotten under pen:
// Forget after the later of its last strike and its block's end.
func Expiry(pen *sluice.Penalty, ps PenaltyState) int64 {
	return max(ps.Last, ps.Until) + int64(pen.Forget)
}

// Strike returns the record after a denial at time now of a key that is not
// blocked, and whether it became an offence (Until then holds the new
// block's end). A record whose offence window has passed starts afresh.
func Strike(pen *sluice.Penalty, ps PenaltyState, now int64) (PenaltyState, bool) {
	if ps != (PenaltyState{}) && now >= Expiry(pen, ps) {
		ps = PenaltyState{}
	}
	ps.Strikes++
	ps.Last = now
	if ps.Strikes < pen.Strikes() {
		return ps, false
	}
	ps.Offences++
	ps.Strikes = 0
	ps.Until = now + int64(Block(pen, ps.Offences))
	return ps, true
}

// Block returns the block duration of offence number n under pen, counting
// from 1: the last of pen.Blocks serves every offence beyond the list.
func Block(pen *sluice.Penalty, n int64) time.Duration {
	return pen.Blocks[min(max(n, 1), int64(len(pen.Blocks)))-1]
}

package sluice

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/compiled"
)

// MaxPenaltyBlocks is the most block durations one Penalty may list.
const MaxPenaltyBlocks = 8

// ErrInvalidPenalty reports a Penalty that cannot be used; the error names
// the offending value.
var ErrInvalidPenalty = errors.New("sluice: invalid penalty")

// ErrPenaltyUnsupported reports a store that cannot apply a policy's
// Penalty. Stores return it, wrapped, from every decision on such a policy
// rather than ignore the penalty.
var ErrPenaltyUnsupported = errors.New("sluice: store does not support penalties")

// Penalty blocks keys that keep being denied: escalating blocks for repeat
// offenders, as a login endpoint wants against password guessing.
//
// Every request a policy's limits deny when taken (Allow, AllowN,
// TakeAll; not Peek or Reserve) is a strike against its key. After
// strikes within one offence window make an offence: the key is then blocked
// for Blocks[0] on its first offence, Blocks[1] on its second, and so on,
// the last duration serving every offence beyond the list. While a key is
// blocked every request for it is denied, with RetryAfter (and ResetAfter)
// up to the block's end, and charged to nothing; requests during a block
// are not strikes. Strikes and offences are forgotten once the key has gone
// Forget without a strike, counted from its last strike or from the end of
// its last block, whichever is later: the offence window. Reset lifts a
// block and forgets the strikes and offences with the key's state.
//
// A Penalty is a value; a Policy copies it.
type Penalty struct {
	// After is how many denials within the offence window make an
	// offence. Zero means 1: the first denial blocks. At most 1,000,000.
	After int
	// Blocks are the block durations of the first, second, ... offence;
	// the last serves every later one. Required: 1 to MaxPenaltyBlocks
	// durations, each between one millisecond and 366 days.
	Blocks []time.Duration
	// Forget is the quiet period after which a key's strikes and offences
	// are forgotten. Required: between one millisecond and 366 days.
	Forget time.Duration
}

// maxPenaltyDuration bounds block and quiet durations (a year), well inside
// the stores' arithmetic.
const maxPenaltyDuration = 366 * 24 * time.Hour

// Validate reports whether the penalty can be used, with an error wrapping
// ErrInvalidPenalty that names the offending value.
func (pen Penalty) Validate() error {
	if pen.After < 0 || pen.After > 1_000_000 {
		return fmt.Errorf("%w: after %d, want 0 to 1000000", ErrInvalidPenalty, pen.After)
	}
	if len(pen.Blocks) == 0 || len(pen.Blocks) > MaxPenaltyBlocks {
		return fmt.Errorf("%w: %d blocks, want 1 to %d", ErrInvalidPenalty, len(pen.Blocks), MaxPenaltyBlocks)
	}
	for i, b := range pen.Blocks {
		if b < time.Millisecond || b > maxPenaltyDuration {
			return fmt.Errorf("%w: block %d is %v, want 1ms to %v", ErrInvalidPenalty, i, b, maxPenaltyDuration)
		}
	}
	if pen.Forget < time.Millisecond || pen.Forget > maxPenaltyDuration {
		return fmt.Errorf("%w: forget is %v, want 1ms to %v", ErrInvalidPenalty, pen.Forget, maxPenaltyDuration)
	}
	return nil
}

// Strikes returns how many denials make an offence: After, or 1 if After is
// zero.
func (pen Penalty) Strikes() int64 { return max(int64(pen.After), 1) }

// WithPenalty returns a copy of the policy that applies pen to its keys,
// or an error wrapping ErrInvalidPenalty. The copy keeps the policy's name
// and limits, so it shares their state; the penalty record of a key is kept
// under the policy's name too.
func (p *Policy) WithPenalty(pen Penalty) (*Policy, error) {
	if err := pen.Validate(); err != nil {
		return nil, fmt.Errorf("policy %q: %w", p.name, err)
	}
	if p.sync.Mode != SyncExact {
		return nil, fmt.Errorf("%w: policy %q: a penalty needs sync exact, not %s", ErrInvalidPenalty, p.name, p.sync.Mode)
	}
	q := *p
	pen.Blocks = append([]time.Duration(nil), pen.Blocks...)
	q.penalty = &pen
	q.c.Penalty = q.penalty
	q.c.PenaltySlot = compiled.SlotOf(p.name + "|penalty")
	return &q, nil
}

// Penalty returns the policy's penalty and true, or false if it has none.
func (p *Policy) Penalty() (Penalty, bool) {
	if p.penalty == nil {
		return Penalty{}, false
	}
	pen := *p.penalty
	pen.Blocks = append([]time.Duration(nil), pen.Blocks...)
	return pen, true
}

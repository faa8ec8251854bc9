// Package compiled holds the compiled form of a sluice.Policy, shared by
// package sluice, which builds it, and package storekit, which shows it to
// stores, so that the store writer's view of a policy stays out of the
// library user's API. It also numbers limit identities and definitions
// within the process. Nothing here imports package sluice.
package compiled

import (
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/algo"
)

// Policy is what a store needs of a sluice.Policy. Package sluice fills it
// when it builds a policy and never changes it after: it is safe for
// concurrent use.
type Policy struct {
	// Rules are the compiled limits, in order.
	Rules []algo.Rule
	// IDs are the limits' identities, "<name>|<i>".
	IDs []string
	// Slots number the identities within the process (SlotOf).
	Slots []uint32
	// Defs number the definitions within the process (DefOf).
	Defs []uint32
	// Penalty is the policy's *sluice.Penalty, or nil for none: held as
	// any because this package cannot name the type.
	Penalty any
	// PenaltySlot numbers the identity of the policy's penalty record.
	PenaltySlot uint32
}

// Of returns the compiled form of p, a *sluice.Policy. Package sluice sets
// it when it is initialised; it is then never changed.
var Of func(p any) *Policy

// slots numbers limit identities (policy name and index) within the
// process, so that in-process stores can key state by a small integer
// instead of a string.
var slots struct {
	sync.Mutex
	m map[string]uint32
}

// SlotOf returns the process-wide number of identity id: equal identities
// get equal numbers. It is safe for concurrent use.
func SlotOf(id string) uint32 {
	slots.Lock()
	defer slots.Unlock()
	if slots.m == nil {
		slots.m = make(map[string]uint32)
	}
	n, ok := slots.m[id]
	if !ok {
		n = uint32(len(slots.m)) + 1
		slots.m[id] = n
	}
	return n
}

// defs numbers limit definitions (algorithm, count, period, burst and
// calendar) within the process. rules holds the compiled rule of every
// number, index 0 unused; it only grows, and readers load it without the
// lock.
var defs struct {
	sync.Mutex
	m     map[defKey]uint32
	rules atomic.Pointer[[]*algo.Rule]
}

type defKey struct {
	alg                  algo.Algorithm
	count, period, burst int64
	cal                  string // the calendar's String, if any
}

// DefOf returns the process-wide number of r's definition: equal
// definitions get equal numbers, never zero. It is safe for concurrent use.
func DefOf(r algo.Rule) uint32 {
	k := defKey{alg: r.Algorithm(), count: r.Count(), period: int64(r.Period()), burst: r.Burst()}
	if c := r.Calendar(); c != nil {
		k.cal = c.String()
	}
	defs.Lock()
	defer defs.Unlock()
	if defs.m == nil {
		defs.m = make(map[defKey]uint32)
	}
	if n, ok := defs.m[k]; ok {
		return n
	}
	var rules []*algo.Rule
	if old := defs.rules.Load(); old != nil {
		rules = *old
	} else {
		rules = []*algo.Rule{nil}
	}
	n := uint32(len(rules))
	rules = append(rules[:len(rules):len(rules)], &r)
	defs.rules.Store(&rules)
	defs.m[k] = n
	return n
}

// DefRule returns the compiled rule of definition def, or nil if no policy
// of the process has that number. It is safe for concurrent use and does
// not lock.
func DefRule(def uint32) *algo.Rule {
	rules := defs.rules.Load()
	if rules == nil || def == 0 || int(def) >= len(*rules) {
		return nil
	}
	return (*rules)[def]
}

// logSlots marks the limit identities (by SlotOf number) to which some
// policy of the process has given a sliding_log limit. Only the state of
// those can be a sliding log, so that an in-process store need not look
// among its logs for the state of any other. It only grows, and readers
// load it without the lock.
var logSlots struct {
	sync.Mutex
	bits atomic.Pointer[[]uint64]
}

// MarkLog records that identity slot has a sliding_log limit. Package
// sluice calls it before a policy with that limit is used. It is safe for
// concurrent use.
func MarkLog(slot uint32) {
	if MayLog(slot) {
		return
	}
	logSlots.Lock()
	defer logSlots.Unlock()
	var bits []uint64
	if old := logSlots.bits.Load(); old != nil {
		bits = *old
	}
	w := int(slot / 64)
	next := make([]uint64, max(len(bits), w+1))
	copy(next, bits)
	next[w] |= 1 << (slot % 64)
	logSlots.bits.Store(&next)
}

// MayLog reports whether some policy of the process has given identity
// slot a sliding_log limit (MarkLog). It is safe for concurrent use and
// does not lock.
func MayLog(slot uint32) bool {
	bits := logSlots.bits.Load()
	if bits == nil {
		return false
	}
	w := int(slot / 64)
	return w < len(*bits) && (*bits)[w]&(1<<(slot%64)) != 0
}

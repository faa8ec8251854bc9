package sluice

import (
	"errors"
	"fmt"
	"time"
)

// SyncMode is how a store shared between processes (package redisstore)
// keeps a policy's limits in step across them. In-process stores decide
// every mode alike: exactly. Processes may decide one policy in different
// modes (during a rollout): exact and lease together never exceed the
// limit; with async among them, the async bound holds.
type SyncMode uint8

const (
	// SyncExact decides every request in the shared store: one round trip
	// per decision, exact. The default.
	SyncExact SyncMode = iota
	// SyncLease lets a process take a quota lease on a hot key: part of
	// the quota, taken from the shared store in one call, spent locally,
	// and what is left returned when the lease ends. The limit is never
	// exceeded across processes; a request may be refused while another
	// process holds unused leased units. See package redisstore.
	SyncLease
	// SyncAsync decides locally and sends the counts to the shared store
	// every Sync.Interval, receiving the global count back: the limit can
	// be exceeded by a stated bound. See package redisstore.
	SyncAsync
)

// String returns the configuration name: "exact", "lease" or "async".
func (m SyncMode) String() string {
	switch m {
	case SyncExact:
		return "exact"
	case SyncLease:
		return "lease"
	case SyncAsync:
		return "async"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// ParseSyncMode returns the SyncMode named "exact", "lease" or "async".
func ParseSyncMode(s string) (SyncMode, error) {
	for _, m := range []SyncMode{SyncExact, SyncLease, SyncAsync} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: sync %q: want exact, lease or async", ErrInvalidSync, s)
}

// ErrInvalidSync reports a Sync that cannot be used; the error names the
// offending value.
var ErrInvalidSync = errors.New("sluice: invalid sync")

// Sync is a policy's choice of SyncMode. A value; a Policy copies it.
type Sync struct {
	// Mode is the mode. The zero value is SyncExact.
	Mode SyncMode
	// Interval is, for SyncAsync, how often a process sends its counts to
	// the shared store. Zero means DefaultSyncInterval; otherwise between
	// 1ms and 1 minute. Ignored by the other modes.
	Interval time.Duration
}

// DefaultSyncInterval is the Interval of a SyncAsync policy that sets none.
const DefaultSyncInterval = 100 * time.Millisecond

// Validate reports whether s can be used, with an error wrapping
// ErrInvalidSync that names the offending value.
func (s Sync) Validate() error {
	if s.Mode > SyncAsync {
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidSync, s.Mode)
	}
	if s.Mode == SyncAsync && s.Interval != 0 && (s.Interval < time.Millisecond || s.Interval > time.Minute) {
		return fmt.Errorf("%w: interval %v, want 1ms to 1m", ErrInvalidSync, s.Interval)
	}
	return nil
}

// CheckLimit returns an error wrapping ErrInvalidSync if s cannot apply to
// lim: lease and async apply to token_bucket, gcra and fixed_window limits
// that are not calendar quotas (a sliding window's or log's state cannot be
// split into leases or merged from counts, and a calendar quota's windows
// are the calendar's, not the store's).
func (s Sync) CheckLimit(lim Limit) error {
	switch {
	case s.Mode == SyncExact:
		return nil
	case lim.Algorithm == SlidingWindow || lim.Algorithm == SlidingLog:
		return fmt.Errorf("%w: sync %s needs token_bucket, gcra or fixed_window, not %s", ErrInvalidSync, s.Mode, lim.Algorithm)
	case lim.Calendar != nil:
		return fmt.Errorf("%w: sync %s does not apply to a calendar quota (period %s): its windows are the calendar's, not the store's", ErrInvalidSync, s.Mode, lim.Calendar)
	}
	return nil
}

// WithSync returns a copy of the policy decided in mode s by stores shared
// between processes, or an error wrapping ErrInvalidSync. The copy keeps
// the policy's name and limits, so it shares their state. SyncLease and
// SyncAsync apply to policies of one token_bucket, gcra or fixed_window
// limit only: a policy of several limits, with a sliding_window or
// sliding_log limit, or with a penalty, is refused (the stores could not keep those exact, or within a bound,
// without deciding every request centrally).
func (p *Policy) WithSync(s Sync) (*Policy, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("policy %q: %w", p.name, err)
	}
	if s.Mode != SyncExact {
		if len(p.limits) != 1 {
			return nil, fmt.Errorf("%w: policy %q: sync %s applies to a policy of one limit, not %d", ErrInvalidSync, p.name, s.Mode, len(p.limits))
		}
		for i, l := range p.limits {
			if err := s.CheckLimit(l); err != nil {
				return nil, fmt.Errorf("policy %q limit %d: %w", p.name, i, err)
			}
		}
		if p.penalty != nil {
			return nil, fmt.Errorf("%w: policy %q: sync %s cannot apply with a penalty (every strike must reach the shared store)", ErrInvalidSync, p.name, s.Mode)
		}
	}
	if s.Mode == SyncAsync && s.Interval == 0 {
		s.Interval = DefaultSyncInterval
	}
	if s.Mode != SyncAsync {
		s.Interval = 0
	}
	q := *p
	q.sync = s
	return &q, nil
}

// Sync returns the policy's sync mode: SyncExact unless set by WithSync.
func (p *Policy) Sync() Sync { return p.sync }

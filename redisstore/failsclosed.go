package redisstore

import "github.com/sluicehq/sluice"

var _ sluice.ClosedFailer = (*Store)(nil)

// FailsClosed reports whether a decision Redis could not make is a denial
// (OnError Deny). Such a denial has Degraded set and says nothing about the
// client's use of its quota (see sluice.ClosedFailer).
func (s *Store) FailsClosed() bool { return s.onError == Deny }

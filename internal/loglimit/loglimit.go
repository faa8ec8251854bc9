// Package loglimit bounds how many log lines a kind of event may write, so
// that an attack or an outage cannot flood the log: a Limit admits at most
// Per lines a second, and the caller counts the rest (Sluice exports them
// as sluice_log_suppressed_total).
package loglimit

import (
	"sync/atomic"
	"time"
)

// Limit admits at most Per lines in each second of the clock; Per 0 or
// less admits none. The zero Limit admits none. It is safe for concurrent
// use and does not lock.
type Limit struct {
	Per    int64
	window atomic.Int64 // Unix second of the current window
	n      atomic.Int64 // lines admitted in it
}

// Allow reports whether a line may be written at now.
func (l *Limit) Allow(now time.Time) bool {
	if l.Per <= 0 {
		return false
	}
	sec := now.Unix()
	if w := l.window.Load(); w != sec {
		if l.window.CompareAndSwap(w, sec) {
			l.n.Store(0)
		}
	}
	return l.n.Add(1) <= l.Per
}

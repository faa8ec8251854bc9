package server

import "time"

// SetAfter replaces the timer that waits out Options.ShutdownDelay, for
// tests that end the delay themselves. Call it before Run.
func SetAfter(g *Server, after func(time.Duration) <-chan time.Time) { g.after = after }

// Package bench compares Sluice's in-memory store with the limiters a Go
// developer would otherwise pick: golang.org/x/time/rate behind a map,
// sethvargo/go-limiter, ulule/limiter and throttled. It is a module of its
// own so that these peers never become dependencies of Sluice. Everything is
// in its benchmarks; see BENCHMARKS.md at the repository root for the
// results and the command that produced them.
package bench

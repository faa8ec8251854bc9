// Package bench compares Sluice's in-memory store with the limiters a Go
// developer would otherwise pick: golang.org/x/time/rate behind a map,
// sethvargo/go-limiter, ulule/limiter and throttled. It is a module of its
// own so that these peers never become dependencies of Sluice. Beside them it
// runs floors, which are not limiters but the least work any keyed limiter
// does per decision, and a load-latency probe, so that a goal stated as a
// ratio to a peer can be read against what the machine allows. Everything is
// in its benchmarks; see BENCHMARKS.md at the repository root for the
// results and the command that produced them.
package bench

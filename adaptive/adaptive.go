// Package adaptive protects an upstream from overload: it limits the
// requests in flight to it to a number that follows the upstream's
// latency, queues the requests beyond it for a bounded time, and sheds
// the least important first. A Limiter is the library's face; Middleware
// puts one in front of an http.Handler, and package httplimit's
// adaptive concurrency rules use one each.
//
// # The limit
//
// The limit is moved by a gradient controller, as in Envoy's adaptive
// concurrency filter and Netflix's gradient limiters. The latencies of
// the requests answered are gathered in windows (at least Window long and
// at least 10 answers); when a window closes, its Percentile latency is
// compared with the no-load latency, the latency the upstream gives when
// nothing queues in it:
//
//	gradient = noLoad × (1 + Tolerance) / latency, within [0.5, 2]
//	limit   += Smoothing × (limit × gradient − limit), within [MinLimit, MaxLimit]
//
// While the latency stays within Tolerance of the no-load latency the
// limit grows; once requests queue in the upstream the latency rises with
// every request added, and the limit settles where the queue holds
// Tolerance of the upstream's concurrency (an upstream of 20 workers, at
// the default 0.5, gets about 30 requests in flight).
// The limit does not grow while fewer than half of it are in flight: a
// latency measured under light demand says nothing of a larger limit.
// Answers the upstream could not give (Outcome Overloaded: a 502, 503 or
// 504) shrink the limit by their share of the window.
//
// A gradient controller was chosen over a Vegas-style one (which counts
// the requests queued in the upstream as limit × (1 − noLoad/latency) and
// adds or takes one at a time) because it moves in proportion to the
// error: after a slowdown it settles in a few windows rather than one
// request per window, and one Tolerance says how much queueing the
// upstream may see, whatever its size.
//
// # The no-load latency
//
// Under steady load every request queues a little, so the latencies seen
// say nothing of the upstream without load, and a baseline taken from
// them drifts upwards with the load. The no-load latency is measured by a
// probe instead, without starving traffic: for a short while the limit
// of every class but Critical drops to limit / (1 + Tolerance)² (at least
// halved, at least MinLimit), which takes away the queue the tolerance
// lets the upstream hold, and the Percentile latency of the next
// max(8, that limit) requests admitted with no more than that in flight,
// all of them answered (not only the fastest), is the no-load latency.
// Critical requests are not held back: they count in flight, and the
// probe measures while they leave it room. A probe lasts about two round
// trips of the upstream; the requests it holds back wait in the queue
// rather than being refused, and most of the limit stays in use. A probe
// runs every ProbeInterval (±10%, so that the gateways of a fleet do not
// probe in step) and with the first requests a Limiter sees, and early
// when ten windows in a row were above the tolerance while the limit
// shrank by a quarter: an upstream that slowed for good (its service
// time doubled) would otherwise push the limit to MinLimit against a
// stale baseline. A window faster than the no-load latency lowers it at
// once.
//
// # Classes, the queue and shedding
//
// Each request has a Class: Critical, Default or Sheddable. A class may
// fill only its share of the limit (Shares): by default Default requests
// are admitted while fewer than 90% of the limit are in flight and
// Sheddable ones below 75%, so that the last 10% is kept for Critical
// requests and the last 25% from Sheddable ones. A request that cannot
// be admitted waits, at most MaxWait, in a queue that admits the highest
// class first as slots free up; beyond MaxWait, or with a full queue, it
// is shed. Within a class the queue is first in, first out, until it has
// not been empty for MaxWait (a standing queue, the mark of overload
// rather than a burst): then it serves the newest first, so that the
// requests admitted are the ones whose clients are still likely to wait,
// and the oldest are the ones shed (Facebook's adaptive LIFO).
//
// # Fleet
//
// The limit is local: each process learns its own. With a Fleet, the
// requests in flight are also counted across every process that shares
// a sluice.LeaseStore (Redis), under one fleet-wide limit that the
// classes share as they share the local one: a Default request then needs
// a free slot both under its local share and under its share of the fleet
// limit, so that critical traffic keeps its share of the whole fleet.
//
// A Limiter is safe for concurrent use. It runs no goroutine: the
// controller moves on the requests' own calls.
package adaptive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Class is a request's priority: under pressure the lowest class is shed
// first. The zero value is Default.
type Class int8

// The classes, from the least to the most important.
const (
	// Sheddable requests are the first shed: prefetches, batch jobs,
	// retries a client marks as such.
	Sheddable Class = -1
	// Default is the class of every request nothing else classifies.
	Default Class = 0
	// Critical requests are shed last and keep a share of the limit that
	// no other class may fill: checkout, login, health checks of the
	// clients' own.
	Critical Class = 1
)

// Classes lists the classes from the most to the least important.
var Classes = [...]Class{Critical, Default, Sheddable}

// String returns the class's name: "critical", "default" or "sheddable".
func (c Class) String() string {
	switch c {
	case Critical:
		return "critical"
	case Default:
		return "default"
	case Sheddable:
		return "sheddable"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// valid reports whether c is one of the three classes.
func (c Class) valid() bool { return c >= Sheddable && c <= Critical }

// ParseClass returns the class named s ("critical", "default" or
// "sheddable", in any case). Errors wrap ErrInvalidOptions.
func ParseClass(s string) (Class, error) {
	for _, c := range Classes {
		if strings.EqualFold(s, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown class %q (want critical, default or sheddable)", ErrInvalidOptions, s)
}

// Shares are the most of a limit each class may fill: a request of the
// class is admitted only while fewer than share × limit requests (at
// least one) are in flight. Critical requests may fill the whole limit.
type Shares struct {
	// Default is Default requests' share, in (0, 1]. Default 0.9.
	Default float64
	// Sheddable is Sheddable requests' share, in (0, Default]. Default
	// 0.75.
	Sheddable float64
}

// of returns c's share.
func (s Shares) of(c Class) float64 {
	switch c {
	case Default:
		return s.Default
	case Sheddable:
		return s.Sheddable
	}
	return 1
}

// threshold returns how many requests in flight, at most, admit a request
// of class c under limit.
func (s Shares) threshold(c Class, limit int) int {
	return max(int(float64(limit)*s.of(c)), 1)
}

// Bounds of the options.
const (
	// MaxLimit bounds Options.MaxLimit.
	MaxLimit = sluice.MaxConcurrency
	// MaxWait bounds Options.MaxWait.
	MaxWait = time.Minute
)

// ErrInvalidOptions reports options that can never work. Errors wrapping
// it name the offending value.
var ErrInvalidOptions = errors.New("adaptive: invalid options")

// Options configure a Limiter. The zero value of each field is its
// documented default.
type Options struct {
	// MinLimit is the lowest the limit goes: 1 to MaxLimit. Default 1.
	MinLimit int
	// MaxLimit is the highest the limit goes: MinLimit to MaxLimit.
	// Default 1000.
	MaxLimit int
	// InitialLimit is the limit before the first windows have moved it,
	// within [MinLimit, MaxLimit]. Default 20 (MaxLimit if lower).
	InitialLimit int
	// Tolerance is how far the latency may rise above the no-load
	// latency, as a fraction of it, before the limit shrinks: 0.5 lets it
	// be 1.5 times the no-load latency. It is the share of the upstream's
	// own concurrency that queues in it. Above 0, at most 10. Default 0.5.
	Tolerance float64
	// Smoothing is how much of each window's change the limit takes:
	// above 0, at most 1 (1 takes all of it). Default 0.2.
	Smoothing float64
	// Window is the shortest time the latencies are gathered over before
	// the limit moves (a window also waits for 10 answers, and closes
	// early at 1000): 1ms to 1 minute. Default 100ms.
	Window time.Duration
	// Percentile is the percentile of a window's latencies compared with
	// the no-load latency, and of a probe's that measures it: above 0,
	// below 1. Default 0.5, the median.
	Percentile float64
	// ProbeInterval is how often the no-load latency is measured again
	// (see the package documentation): at least 10 windows, at most 24
	// hours. Default 15s.
	ProbeInterval time.Duration
	// MaxWait is the longest a request waits in the queue for a slot
	// before it is shed: 0 (shed at once) to MaxWait. Default 0.
	MaxWait time.Duration
	// MaxQueue is the most requests waiting at once; one more is shed at
	// once. 1 to 1,000,000. Default the larger of 1000 and MaxLimit.
	// Unused when MaxWait is 0.
	MaxQueue int
	// Shares are the most of the limit each class may fill. Default
	// Default 0.9, Sheddable 0.75.
	Shares Shares
	// RetryAfter is what a shed request is told to wait before it tries
	// again (Admission.RetryAfter): 1s to 1 hour, in whole seconds.
	// Default 1s.
	RetryAfter time.Duration
	// Fleet, if set, also limits the requests in flight across every
	// process that shares its store (see NewFleet). Default: none.
	Fleet *Fleet
}

// withDefaults returns o with its zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.MinLimit == 0 {
		o.MinLimit = 1
	}
	if o.MaxLimit == 0 {
		o.MaxLimit = 1000
	}
	if o.InitialLimit == 0 {
		o.InitialLimit = min(max(20, o.MinLimit), o.MaxLimit)
	}
	if o.Tolerance == 0 {
		o.Tolerance = 0.5
	}
	if o.Smoothing == 0 {
		o.Smoothing = 0.2
	}
	if o.Window == 0 {
		o.Window = 100 * time.Millisecond
	}
	if o.Percentile == 0 {
		o.Percentile = 0.5
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = max(15*time.Second, aboveToProbe*o.Window)
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = max(o.MaxLimit, 1000)
	}
	if o.Shares.Default == 0 {
		o.Shares.Default = 0.9
	}
	if o.Shares.Sheddable == 0 {
		o.Shares.Sheddable = min(0.75, o.Shares.Default)
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	return o
}

// Validate checks the options, with their defaults. Errors wrap
// ErrInvalidOptions and name the field.
func (o Options) Validate() error {
	o = o.withDefaults()
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%w: %s %v, want %s", ErrInvalidOptions, field, v, want)
	}
	switch {
	case o.MinLimit < 1 || o.MinLimit > MaxLimit:
		return bad("min limit", o.MinLimit, fmt.Sprintf("1 to %d", MaxLimit))
	case o.MaxLimit < o.MinLimit || o.MaxLimit > MaxLimit:
		return bad("max limit", o.MaxLimit, fmt.Sprintf("the min limit (%d) to %d", o.MinLimit, MaxLimit))
	case o.InitialLimit < o.MinLimit || o.InitialLimit > o.MaxLimit:
		return bad("initial limit", o.InitialLimit, fmt.Sprintf("%d to %d, the min and max limits", o.MinLimit, o.MaxLimit))
	case !(o.Tolerance > 0 && o.Tolerance <= 10):
		return bad("tolerance", o.Tolerance, "above 0 and at most 10")
	case !(o.Smoothing > 0 && o.Smoothing <= 1):
		return bad("smoothing", o.Smoothing, "above 0 and at most 1")
	case o.Window < time.Millisecond || o.Window > time.Minute:
		return bad("window", o.Window, "1ms to 1m0s")
	case !(o.Percentile > 0 && o.Percentile < 1):
		return bad("percentile", o.Percentile, "above 0 and below 1")
	case o.ProbeInterval < aboveToProbe*o.Window || o.ProbeInterval > 24*time.Hour:
		return bad("probe interval", o.ProbeInterval, fmt.Sprintf("%v (10 windows) to 24h0m0s", aboveToProbe*o.Window))
	case o.MaxWait < 0 || o.MaxWait > MaxWait:
		return bad("max wait", o.MaxWait, "0s to "+MaxWait.String())
	case o.MaxQueue < 1 || o.MaxQueue > 1_000_000:
		return bad("max queue", o.MaxQueue, "1 to 1000000")
	case !(o.Shares.Default > 0 && o.Shares.Default <= 1):
		return bad("default share", o.Shares.Default, "above 0 and at most 1")
	case !(o.Shares.Sheddable > 0 && o.Shares.Sheddable <= o.Shares.Default):
		return bad("sheddable share", o.Shares.Sheddable, fmt.Sprintf("above 0 and at most the default share (%v)", o.Shares.Default))
	case o.RetryAfter < time.Second || o.RetryAfter > time.Hour || o.RetryAfter%time.Second != 0:
		return bad("retry after", o.RetryAfter, "whole seconds from 1s to 1h0m0s")
	}
	return nil
}

// Limiter admits requests to one upstream under its adaptive limit. Build
// one with New; it is safe for concurrent use.
type Limiter struct {
	o  Options // with defaults
	st *state  // shared with the Limiters WithOptions derives
}

// state is what a Limiter learns and holds: the controller, the requests
// in flight and the queue.
type state struct {
	mu       sync.Mutex
	g        gradient
	inFlight int
	queue    queue
}

// New returns a Limiter with the options o.
func New(o Options) (*Limiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	st := &state{g: newGradient(&o)}
	return &Limiter{o: o, st: st}, nil
}

// WithOptions returns a Limiter with the options o that shares l's state:
// its limit and no-load latency, its requests in flight and its queue. A
// configuration reload swaps it in for l without forgetting what l
// learned or letting the requests in flight under l go uncounted. Until
// requests stop using l, the two apply their own options to the same
// state. The limit is brought within o's bounds by the next window.
func (l *Limiter) WithOptions(o Options) (*Limiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{o: o.withDefaults(), st: l.st}, nil
}

// Options returns the Limiter's options, with their defaults.
func (l *Limiter) Options() Options { return l.o }

// Reason says why a request was shed.
type Reason uint8

// The reasons, with the names used as metric labels.
const (
	NotShed    Reason = iota // "": the request was admitted
	NoSlot                   // "limit": its class's share of the limit was full and it could not wait (MaxWait 0)
	QueueFull                // "queue_full": the queue held MaxQueue requests already
	Timeout                  // "timeout": it waited MaxWait without a slot
	FleetLimit               // "fleet": its class's share of the fleet limit was full
)

var reasonNames = [...]string{"", "limit", "queue_full", "timeout", "fleet"}

// String returns the reason's metric label, such as "timeout".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Admission is a Limiter's decision on one request.
type Admission struct {
	// Admitted reports that the request holds a slot.
	Admitted bool
	// Class is the request's class.
	Class Class
	// Reason is why the request was shed; NotShed when it was admitted.
	Reason Reason
	// Waited is how long the request waited in the queue.
	Waited time.Duration
	// Limit is the limit the request was decided under: while a probe
	// runs, the probe's for every class but Critical.
	Limit int
	// InFlight is the number of requests in flight after the decision.
	InFlight int
	// RetryAfter is, for a shed request, how long its client should wait
	// before it tries again (Options.RetryAfter).
	RetryAfter time.Duration
	// FleetErr is, when the Fleet's store failed (or answered from its
	// failure path), why: the request was decided on the local limit
	// alone.
	FleetErr error
}

// Outcome is what a request's answer says of the upstream.
type Outcome uint8

// The outcomes.
const (
	// Succeeded: the upstream answered; the latency is a sample.
	Succeeded Outcome = iota
	// Overloaded: the upstream could not answer (502, 503, 504, a
	// timeout); the limit shrinks by the share of such answers.
	Overloaded
	// Ignored: the answer says nothing of the upstream (the client went
	// away); no sample.
	Ignored
)

// OutcomeOf returns the outcome of an answer with HTTP status code:
// Overloaded for 502, 503 and 504, Succeeded for the rest.
func OutcomeOf(code int) Outcome {
	switch code {
	case 502, 503, 504:
		return Overloaded
	}
	return Succeeded
}

// Stats are a Limiter's state at one moment.
type Stats struct {
	// Limit is the limit requests are admitted under (lower while a
	// probe runs).
	Limit int
	// InFlight is the number of requests holding a slot.
	InFlight int
	// Queued is the number of requests waiting for one.
	Queued int
	// NoLoadLatency is the latency last measured without load; zero
	// before the first measure.
	NoLoadLatency time.Duration
	// Latency is the last window's latency (at Options.Percentile).
	Latency time.Duration
	// Probing reports that a probe measures the no-load latency now.
	Probing bool
	// Probes counts the probes started.
	Probes uint64
}

// Stats returns the Limiter's state.
func (l *Limiter) Stats() Stats {
	st := l.st
	st.mu.Lock()
	defer st.mu.Unlock()
	return Stats{
		Limit:         st.g.effective(),
		InFlight:      st.inFlight,
		Queued:        st.queue.n,
		NoLoadLatency: st.g.noLoad,
		Latency:       st.g.latency,
		Probing:       st.g.probing,
		Probes:        st.g.probes,
	}
}

// Acquire asks for a slot for a request of class c (an unknown class
// counts as Default). A request of class c is admitted while fewer than
// its share of the limit are in flight and no request of its class or a
// higher one waits; otherwise it waits in the queue up to MaxWait, and is
// shed if no slot comes. With a Fleet, an admitted request also needs a
// slot of its class's share of the fleet limit. When the Admission says
// Admitted, the Slot holds the slot until its Release; otherwise the Slot
// is nil. The error is ctx's when it ended while the request waited: the
// request was not admitted.
func (l *Limiter) Acquire(ctx context.Context, c Class) (*Slot, Admission, error) {
	if !c.valid() {
		c = Default
	}
	st, o := l.st, &l.o
	now := time.Now()
	st.mu.Lock()
	before := st.g.effective()
	if st.g.tick(o, now); st.g.effective() > before && st.queue.n > 0 {
		l.dispatch(now) // a probe ended: the limit is back
	}
	limit := st.g.limitFor(c)
	adm := Admission{Class: c, Limit: limit}
	if st.inFlight < o.Shares.threshold(c, limit) && !st.queue.holds(c) {
		s := l.admit(now)
		adm.Admitted, adm.InFlight = true, st.inFlight
		st.mu.Unlock()
		return l.fleet(ctx, s, adm)
	}
	switch {
	case o.MaxWait <= 0:
		adm.Reason = NoSlot
	case st.queue.n >= o.MaxQueue:
		adm.Reason = QueueFull
	}
	if adm.Reason != NotShed {
		adm.InFlight, adm.RetryAfter = st.inFlight, o.RetryAfter
		st.mu.Unlock()
		return nil, adm, nil
	}
	w := &waiter{class: c, ready: make(chan struct{})}
	st.queue.push(w, now)
	st.mu.Unlock()

	t := time.NewTimer(o.MaxWait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	st.mu.Lock()
	adm.Waited = time.Since(now)
	if !w.admitted {
		// Not granted yet: it leaves the queue.
		st.queue.remove(w)
		adm.InFlight = st.inFlight
		st.mu.Unlock()
		if err != nil {
			return nil, adm, err
		}
		adm.Reason, adm.RetryAfter = Timeout, o.RetryAfter
		return nil, adm, nil
	}
	adm.Admitted, adm.Limit, adm.InFlight = true, w.limit, w.inFlight
	st.mu.Unlock()
	s := &Slot{l: l, class: c, admitted: w.at, probe: w.probe}
	if err != nil {
		s.Release(context.WithoutCancel(ctx), Ignored) // granted as the client left
		return nil, Admission{Class: c, Waited: adm.Waited, Limit: adm.Limit, InFlight: adm.InFlight}, err
	}
	return l.fleet(ctx, s, adm)
}

// admit takes a slot at now; st.mu is held.
func (l *Limiter) admit(now time.Time) *Slot {
	st := l.st
	st.inFlight++
	return &Slot{l: l, admitted: now, probe: st.g.admitted(st.inFlight)}
}

// fleet takes the admitted request's slot of the fleet limit, if there is
// one: a refusal gives the local slot back and sheds the request; a store
// that fails lets it through on the local limit alone.
func (l *Limiter) fleet(ctx context.Context, s *Slot, adm Admission) (*Slot, Admission, error) {
	s.class = adm.Class
	f := l.o.Fleet
	if f == nil {
		return s, adm, nil
	}
	lease, d, err := f.acquire(context.WithoutCancel(ctx), adm.Class, &l.o.Shares)
	switch {
	case err != nil:
		adm.FleetErr = err
	case d.Degraded:
		adm.FleetErr = ErrFleetDegraded
		s.fleet = lease
	case !d.Allowed:
		s.Release(context.WithoutCancel(ctx), Ignored)
		adm.Admitted, adm.Reason, adm.RetryAfter = false, FleetLimit, l.o.RetryAfter
		return nil, adm, nil
	default:
		s.fleet = lease
	}
	return s, adm, nil
}

// dispatch admits the waiting requests that fit under the limit, the
// highest class first; st.mu is held.
func (l *Limiter) dispatch(now time.Time) {
	st := l.st
	standing := st.queue.standing(now, l.o.MaxWait)
	for _, c := range Classes {
		limit := st.g.limitFor(c)
		for st.inFlight < l.o.Shares.threshold(c, limit) {
			w := st.queue.pop(c, standing)
			if w == nil {
				break
			}
			st.inFlight++
			w.probe = st.g.admitted(st.inFlight)
			w.admitted, w.at, w.limit, w.inFlight = true, now, limit, st.inFlight
			close(w.ready)
		}
	}
}

// Slot is an admitted request's place under the limit. Release it when the
// request ends. Its methods are safe for concurrent use.
type Slot struct {
	l        *Limiter
	class    Class
	admitted time.Time
	probe    uint64 // see gradient.admitted
	fleet    *sluice.Lease

	mu       sync.Mutex
	sampled  bool
	released bool
}

// Class returns the class the slot was admitted for.
func (s *Slot) Class() Class { return s.class }

// Record takes the request's latency, from its admission to now, as a
// sample of the upstream's with outcome o: call it when the upstream's
// answer begins (its status and headers are known), so that the time a
// slow client takes to read the body is not counted. Only the first call
// of Record or Release counts.
func (s *Slot) Record(o Outcome) {
	s.mu.Lock()
	if s.sampled {
		s.mu.Unlock()
		return
	}
	s.sampled = true
	s.mu.Unlock()
	s.record(o, time.Now(), false)
}

// Release gives the slot back, and, unless Record was called, takes the
// latency from its admission to now as a sample with outcome o. With a
// Fleet it gives the fleet's slot back too, in the store, within ctx (a
// slot whose release fails expires by itself after the fleet's lease).
// Releasing again does nothing.
func (s *Slot) Release(ctx context.Context, o Outcome) {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	sample := !s.sampled
	s.sampled = true
	s.mu.Unlock()
	if s.fleet != nil {
		_ = s.fleet.Release(ctx)
	}
	if sample {
		s.record(o, time.Now(), true)
	} else {
		s.record(Ignored, time.Now(), true)
	}
}

// record feeds the sample to the controller and, with release, frees the
// slot; either may admit waiting requests.
func (s *Slot) record(o Outcome, now time.Time, release bool) {
	st := s.l.st
	st.mu.Lock()
	defer st.mu.Unlock()
	moved := false
	if o != Ignored {
		moved = st.g.observe(&s.l.o, now, sample{latency: now.Sub(s.admitted), probe: s.probe, dropped: o == Overloaded})
	} else {
		st.g.tick(&s.l.o, now)
	}
	if release {
		st.inFlight--
	}
	if (release || moved) && st.queue.n > 0 {
		s.l.dispatch(now)
	}
}

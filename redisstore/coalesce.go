package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// coalescer gathers takes (and TakeAll batches, below) that arrive while
// the store's calls to Redis are all busy into one call of the script's
// "each" op, which decides every take on its own (and every batch whole),
// in order, exactly as separate calls at the same moment would. Redis then
// runs one script call for many decisions: less of its CPU per decision
// (the call itself costs about a third of a one-limit decision) and fewer,
// larger writes for the client.
//
// Up to maxBusy calls are in flight at once. A take that finds one free
// sends itself at once, alone, exactly as without the coalescer, so a lone
// caller waits for nothing. A take that finds none queues; when a call
// returns, the oldest queued take sends the queue, up to maxBatch takes, as
// the next call. Each caller thus sends at most one call, its own.
//
// A take ends with its context, queued or already part of a call (which
// then goes on without it, as a call abandoned by its caller does); the
// call's deadline, Timeout after the oldest take of the call arrived, bounds
// the wait of the others. A coalescer is safe for concurrent use.
type coalescer struct {
	maxBusy, maxBatch int

	mu    sync.Mutex
	busy  int       // calls in flight
	queue []*waiter // takes waiting for a call, oldest first
}

// waiter is one take, or one TakeAll batch, on its way through the
// coalescer.
type waiter struct {
	reqs []sluice.Request // a take (one request), or a batch charged whole or not at all
	comp []*compiled      // their compiled policies
	nl   int              // how many limits it decides
	// start is when it arrived; its wait ends Timeout later.
	start time.Time

	res []int64 // the reply: the time and wait, then four values per limit
	err error

	// wake receives one message per waiter that queued: nil once res and
	// err are set, or the batch, led by this waiter, that it is to send.
	wake chan []*waiter
	one  [1]*waiter
	buf  [10]int64
	// a take's request, in place
	oneReq  [1]sluice.Request
	oneComp [1]*compiled
}

var waiters = sync.Pool{New: func() any { return &waiter{wake: make(chan []*waiter, 1)} }}

// take decides a take of n for key under p, appending the script's reply
// to dst.
func (co *coalescer) take(ctx context.Context, s *Store, c *compiled, p *sluice.Policy, key string, n int64, dst []int64) ([]int64, error) {
	w := co.join(func(w *waiter) {
		w.oneReq[0], w.oneComp[0] = sluice.Request{Policy: p, Key: key, N: n}, c
		w.reqs, w.comp, w.nl = w.oneReq[:], w.oneComp[:], len(c.suffixes)
	})
	if w == nil {
		res, err := s.call(ctx, c, p, key, "take", n, 0, dst)
		co.next()
		return res, err
	}
	return co.wait(ctx, s, w, dst)
}

// takeAll decides a batch of requests of nl limits in all, whole or not at
// all, as Store.TakeAll, returning the script's reply.
func (co *coalescer) takeAll(ctx context.Context, s *Store, reqs []sluice.Request, comp []*compiled, nl int) ([]int64, error) {
	w := co.join(func(w *waiter) { w.reqs, w.comp, w.nl = reqs, comp, nl })
	if w == nil {
		res, err := s.batchCall(ctx, reqs, comp, nl, plainScript)
		co.next()
		return res, err
	}
	return co.wait(ctx, s, w, nil)
}

// join takes a place for a call in flight and returns nil, or, when every
// place is taken, queues a waiter that fill describes and returns it.
func (co *coalescer) join(fill func(*waiter)) *waiter {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.busy < co.maxBusy {
		co.busy++
		return nil
	}
	w := waiters.Get().(*waiter)
	fill(w)
	w.start = time.Now()
	co.queue = append(co.queue, w)
	return w
}

// wait waits for w's result, or for the batch it is to send, and appends
// the result to dst. It returns ctx's error as soon as ctx ends, whether w
// is queued, part of a call in flight or leading one: the call then goes on
// without it, and w is left to the garbage collector rather than the pool,
// since the call still writes to it.
func (co *coalescer) wait(ctx context.Context, s *Store, w *waiter, dst []int64) ([]int64, error) {
	var batch []*waiter
	select {
	case batch = <-w.wake:
	case <-ctx.Done():
		if co.leave(w) {
			w.release()
			return nil, ctx.Err()
		}
		select {
		case batch = <-w.wake:
			if batch != nil { // handed a batch to lead just now
				go co.send(s, batch)
				return nil, ctx.Err()
			}
		default: // part of a call in flight, or about to be handed one
			go func() {
				if b := <-w.wake; b != nil {
					co.send(s, b)
				}
			}()
			return nil, ctx.Err()
		}
	}
	if batch != nil && !co.lead(ctx, s, w, batch) {
		return nil, ctx.Err()
	}
	res, err := append(dst, w.res...), w.err
	w.release()
	return res, err
}

// lead sends batch, led by w, and reports whether w's caller is still
// there to read the result. The call's deadline is Timeout after w
// arrived; a caller whose own deadline is earlier (Envoy's is 20ms by
// default) sends it on another goroutine so as to return at that deadline.
func (co *coalescer) lead(ctx context.Context, s *Store, w *waiter, batch []*waiter) bool {
	if d, ok := ctx.Deadline(); !ok || !d.Before(w.start.Add(s.deadlines.timeout)) {
		co.send(s, batch)
		return true
	}
	done := make(chan struct{})
	go func() {
		co.send(s, batch)
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave takes w out of the queue, reporting whether it was still there.
func (co *coalescer) leave(w *waiter) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	i := slices.Index(co.queue, w)
	if i < 0 {
		return false
	}
	co.queue = slices.Delete(co.queue, i, i+1)
	return true
}

// send sends batch, led by batch[0], and wakes its other takes once their
// results are set; then it hands the queue on.
func (co *coalescer) send(s *Store, batch []*waiter) {
	s.sendBatch(batch)
	for _, w := range batch[1:] {
		w.wake <- nil
	}
	co.next()
}

// next is called when a call has returned: it hands the queued takes, up to
// maxBatch, to the oldest of them to send, or frees the call's place.
func (co *coalescer) next() {
	co.mu.Lock()
	if len(co.queue) == 0 {
		co.busy--
		co.mu.Unlock()
		return
	}
	k := min(len(co.queue), co.maxBatch)
	var batch []*waiter
	if k == 1 {
		batch = co.queue[0].one[:]
		batch[0] = co.queue[0]
	} else {
		batch = slices.Clone(co.queue[:k])
	}
	co.queue = co.queue[:copy(co.queue, co.queue[k:])]
	co.mu.Unlock()
	batch[0].wake <- batch
}

func (w *waiter) release() {
	w.reqs, w.comp, w.res, w.err, w.one[0] = nil, nil, nil, nil, nil
	w.oneReq[0], w.oneComp[0] = sluice.Request{}, nil
	waiters.Put(w)
}

// sendBatch decides the waiters of batch in one call of the script's "each"
// op (a lone take as a plain take), within Timeout of the oldest one's
// arrival, and sets their results.
func (s *Store) sendBatch(batch []*waiter) {
	cctx, cancel := context.WithDeadline(context.Background(), batch[0].start.Add(s.deadlines.timeout))
	defer cancel()
	if !s.admit() {
		for _, w := range batch {
			w.err = ErrCircuitOpen
		}
		return
	}
	nl := 0
	for _, w := range batch {
		nl += w.nl
	}
	var res []int64
	var err error
	if w := batch[0]; len(batch) == 1 && len(w.reqs) == 1 {
		// f outlives guard when cctx ends first: it must not read w, which
		// its caller may release by then.
		r, c := w.reqs[0], w.comp[0]
		res, err = guard(cctx, func() ([]int64, error) {
			return s.callWithin(context.Background(), cctx, c, r.Policy, r.Key, "take", r.N, 0, nil)
		})
	} else {
		keys, args := batchArgs("each", s.scriptNow(), nl, len(batch))
		for _, w := range batch {
			keys, args = s.appendLimits(keys, args, w.reqs, w.comp)
		}
		for _, w := range batch {
			args = appendCosts(args, w.reqs, w.comp)
		}
		for _, w := range batch {
			args = append(args, strconv.Itoa(w.nl))
		}
		res, err = guard(cctx, func() ([]int64, error) {
			return s.run(context.Background(), cctx, plainScript, "take", keys, args, nil, 2+4*nl)
		})
	}
	at := 2
	for _, w := range batch {
		w.err = err
		if err != nil {
			continue
		}
		k := 4 * w.nl
		w.res = append(append(w.buf[:0], res[0], res[1]), res[at:at+k]...)
		at += k
	}
}

// guard runs f, a call to Redis within cctx, and returns f's result, or an
// error once cctx ends, whichever comes first. rueidis can hold a call well
// past its context's deadline (a call of a batch of takes was seen to take
// a second with a deadline 0.4ms away while Redis was stopped), and the
// takes of a batch must not wait longer than Timeout from their arrival. f
// must not write to memory that outlives the call: when cctx ends first, f
// finishes later, on its own, and records its outcome with the breaker.
func guard(cctx context.Context, f func() ([]int64, error)) ([]int64, error) {
	type result struct {
		res []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f()
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-cctx.Done():
		return nil, fmt.Errorf("redisstore: take: %w", cctx.Err())
	}
}

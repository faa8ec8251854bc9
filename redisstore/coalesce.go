package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// coalescer gathers takes that arrive while the store's calls to Redis are
// all busy into one call of the script's "each" op, which decides every
// request on its own, in order, exactly as separate calls at the same moment
// would. Redis then runs one script call for many decisions: less of its CPU
// per decision (the call itself costs about a third of a one-limit
// decision) and fewer, larger writes for the client.
//
// Up to maxBusy calls are in flight at once. A take that finds one free
// sends itself at once, alone, exactly as without the coalescer, so a lone
// caller waits for nothing. A take that finds none queues; when a call
// returns, the oldest queued take sends the queue, up to maxBatch takes, as
// the next call. Each caller thus sends at most one call, its own.
//
// A queued take still ends with its context while it waits for a place.
// Once it is part of a call, the call's deadline, Timeout after the oldest
// take of the call arrived, bounds its wait. A coalescer is safe for
// concurrent use.
type coalescer struct {
	maxBusy, maxBatch int

	mu    sync.Mutex
	busy  int       // calls in flight
	queue []*waiter // takes waiting for a call, oldest first
}

// waiter is one take on its way through the coalescer.
type waiter struct {
	c     *compiled
	p     *sluice.Policy
	key   string
	n     int64
	start time.Time // when the take arrived; its wait ends Timeout later

	res []int64 // the reply: the time and wait, then four values per limit
	err error

	// wake receives one message per take that queued: nil once res and err
	// are set, or the batch, led by this take, that it is to send.
	wake chan []*waiter
	one  [1]*waiter
	buf  [10]int64
}

var waiters = sync.Pool{New: func() any { return &waiter{wake: make(chan []*waiter, 1)} }}

// take decides a take of n for key under p, appending the script's reply
// to dst.
func (co *coalescer) take(ctx context.Context, s *Store, c *compiled, p *sluice.Policy, key string, n int64, dst []int64) ([]int64, error) {
	co.mu.Lock()
	if co.busy < co.maxBusy {
		co.busy++
		co.mu.Unlock()
		res, err := s.call(ctx, c, p, key, "take", n, 0, dst)
		co.next()
		return res, err
	}
	w := waiters.Get().(*waiter)
	w.c, w.p, w.key, w.n, w.start = c, p, key, n, time.Now()
	co.queue = append(co.queue, w)
	co.mu.Unlock()

	var batch []*waiter
	select {
	case batch = <-w.wake:
	case <-ctx.Done():
		if co.leave(w) {
			w.release()
			return nil, ctx.Err()
		}
		batch = <-w.wake // already part of a call: its deadline bounds this
	}
	if batch != nil {
		co.send(s, batch)
	}
	res, err := append(dst, w.res...), w.err
	w.release()
	return res, err
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
	s.each(batch)
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
	w.c, w.p, w.key, w.res, w.err, w.one[0] = nil, nil, "", nil, nil, nil
	waiters.Put(w)
}

// each decides the takes of batch in one call of the script's "each" op
// (one alone as a plain take), within Timeout of the oldest one's arrival,
// and sets their results.
func (s *Store) each(batch []*waiter) {
	cctx, cancel := context.WithDeadline(context.Background(), batch[0].start.Add(s.deadlines.timeout))
	defer cancel()
	if !s.breaker.allow() {
		for _, w := range batch {
			w.err = ErrCircuitOpen
		}
		return
	}
	nl := 0
	for _, w := range batch {
		nl += len(w.c.suffixes)
	}
	var res []int64
	var err error
	if len(batch) == 1 {
		w := batch[0]
		res, err = s.callWithin(context.Background(), cctx, w.c, w.p, w.key, "take", w.n, 0, w.buf[:0])
	} else {
		keys := make([]string, 0, 2*nl)
		args := make([]string, 0, 5+8*nl+len(batch))
		args = append(args, "each", "1", s.scriptNow(), "0", strconv.Itoa(nl))
		for _, w := range batch {
			keys = s.appendKeys(keys, w.c, w.p, w.key)
			args = append(args, w.c.args...)
		}
		for _, w := range batch {
			n := "1"
			if w.n != 1 {
				n = strconv.FormatInt(w.n, 10)
			}
			for range w.c.suffixes {
				args = append(args, n)
			}
		}
		for _, w := range batch {
			args = append(args, strconv.Itoa(len(w.c.suffixes)))
		}
		res, err = s.run(context.Background(), cctx, plainScript, "take", keys, args, nil, 2+4*nl)
	}
	at := 2
	for _, w := range batch {
		w.err = err
		if err != nil {
			continue
		}
		k := 4 * len(w.c.suffixes)
		w.res = append(append(w.buf[:0], res[0], res[1]), res[at:at+k]...)
		at += k
	}
}

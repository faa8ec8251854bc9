package adaptive

import "time"

// waiter is a request waiting for a slot.
type waiter struct {
	class Class
	ready chan struct{} // closed when the request is admitted
	// Set, under the state's mutex, when the request is admitted: the
	// time, the limit and the requests in flight then.
	admitted bool
	at       time.Time
	limit    int
	inFlight int
	probe    uint64

	prev, next *waiter
}

// queue holds the waiting requests, one list per class. It is not safe for
// concurrent use: the state's mutex guards it.
type queue struct {
	lists [len(Classes)]struct{ head, tail *waiter }
	n     int
	// since is when the queue last went from empty to holding requests.
	since time.Time
}

// index returns c's list.
func index(c Class) int { return int(Critical - c) }

// push adds w at the back of its class's list.
func (q *queue) push(w *waiter, now time.Time) {
	if q.n == 0 {
		q.since = now
	}
	q.n++
	l := &q.lists[index(w.class)]
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

// remove takes w, which is queued, out of the queue.
func (q *queue) remove(w *waiter) {
	l := &q.lists[index(w.class)]
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}

// pop takes a waiter of class c out of the queue, or returns nil if none
// waits: the oldest, or in a standing queue the newest.
func (q *queue) pop(c Class, standing bool) *waiter {
	l := &q.lists[index(c)]
	w := l.head
	if standing {
		w = l.tail
	}
	if w != nil {
		q.remove(w)
	}
	return w
}

// holds reports whether a request of class c, or of a higher one, waits.
func (q *queue) holds(c Class) bool {
	if q.n == 0 {
		return false
	}
	for i := 0; i <= index(c); i++ {
		if q.lists[i].head != nil {
			return true
		}
	}
	return false
}

// standing reports whether the queue has held requests without a break for
// at least maxWait: every request in it when it began has been admitted
// or shed by now, and the queue still holds more; it is overload, not a
// burst.
func (q *queue) standing(now time.Time, maxWait time.Duration) bool {
	return q.n > 0 && now.Sub(q.since) >= maxWait
}

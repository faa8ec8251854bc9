package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlines bounds the store's calls to Redis by its timeout.
//
// A context.WithTimeout per call costs five allocations and a runtime timer,
// as much as the rest of a decision's client-side work. So a call whose
// context cannot be cancelled (context.Background, or values on top of it)
// shares one deadline context with the calls that start within a sixteenth
// of the timeout after it: its wait then ends between 15/16 of the timeout
// and the timeout after it starts, and it allocates nothing (a context
// carrying values costs one small allocation). A call whose context already
// ends sooner than the timeout keeps its own context, and any other
// cancellable context gets a timeout of its own, exactly as long.
//
// A deadlines is safe for concurrent use.
type deadlines struct {
	timeout time.Duration
	shared  atomic.Pointer[sharedDeadline] // nil until the first shared call
}

// sharedDeadline is a context with a deadline that calls share.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time // ctx's deadline
}

// noCancel is the cancel function of a bound that needs none.
func noCancel() {}

// bound returns ctx bounded by the timeout from now, and the function that
// releases it once the call is done.
func (d *deadlines) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	limit := now.Add(d.timeout)
	if at, ok := ctx.Deadline(); ok && !at.After(limit) {
		return ctx, noCancel
	}
	if ctx.Done() != nil {
		return context.WithDeadline(ctx, limit)
	}
	sd := d.shared.Load()
	if sd == nil || sd.at.Before(limit.Add(-d.timeout/16)) {
		sd = d.renew(sd, limit)
	}
	if ctx == context.Background() || ctx == context.TODO() {
		return sd.ctx, noCancel
	}
	return valuesFrom{sd.ctx, ctx}, noCancel
}

// renew replaces old, the shared deadline that has become too close, with
// one at limit, unless another call has just done so.
func (d *deadlines) renew(old *sharedDeadline, limit time.Time) *sharedDeadline {
	ctx, cancel := context.WithDeadline(context.Background(), limit)
	sd := &sharedDeadline{ctx: ctx, cancel: cancel, at: limit}
	if d.shared.CompareAndSwap(old, sd) {
		return sd
	}
	cancel()
	return d.shared.Load()
}

// stop releases the newest shared deadline's timer; the older ones have
// expired or soon will. Calls still waiting on it end with context.Canceled.
func (d *deadlines) stop() {
	if sd := d.shared.Load(); sd != nil {
		sd.cancel()
	}
}

// valuesFrom is a shared deadline context that answers Value from the
// caller's context, so that hooks of a client handed in with Options.Client
// still see what the caller put there.
type valuesFrom struct {
	context.Context                 // the shared deadline
	values          context.Context // the caller's
}

func (c valuesFrom) Value(key any) any { return c.values.Value(key) }

package redisstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// clientBox holds the client, so that it can be published atomically.
type clientBox struct{ c rueidis.Client }

// client returns the store's client, or nil while it is not connected.
func (s *Store) client() rueidis.Client {
	if b := s.conn.Load(); b != nil {
		return b.c
	}
	return nil
}

// connector keeps trying to connect a store that could not reach Redis in
// New (Options.ConnectLater).
type connector struct {
	last atomic.Pointer[error] // the latest attempt's error
	done chan struct{}         // closed by stop
	once sync.Once
	wg   sync.WaitGroup
}

// connectLater starts connecting s in the background after the first
// attempt failed with first.
func connectLater(s *Store, co rueidis.ClientOption, first error) *connector {
	c := &connector{done: make(chan struct{})}
	c.fail(co, first)
	c.wg.Go(func() {
		wait := 100 * time.Millisecond
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			client, err := rueidis.NewClient(co)
			if err == nil {
				s.conn.Store(&clientBox{client})
				s.changed()
				if s.tab.pending.Load() != 0 {
					s.settleSoon()
				}
				return
			}
			c.fail(co, err)
			wait = nextConnect(wait, rand.Float64())
			t.Reset(wait)
		}
	})
	return c
}

// nextConnect returns the wait before the next attempt to connect after one
// that came wait after the previous: doubling from 100ms up to about a
// second (jittered by ±25% with j in [0, 1)), so that a store connects
// within about a second of Redis's return however long it was away.
func nextConnect(wait time.Duration, j float64) time.Duration {
	if 2*wait < 750*time.Millisecond {
		return 2 * wait
	}
	return time.Duration((0.75 + 0.5*j) * float64(time.Second))
}

func (c *connector) fail(co rueidis.ClientOption, err error) {
	err = fmt.Errorf("%w: connecting to %s: %w", ErrNotConnected, strings.Join(co.InitAddress, ","), err)
	c.last.Store(&err)
}

// err returns the error of decisions made before the store connected. c
// may be nil: a store that was never without a client has none.
func (c *connector) err() error {
	if c != nil {
		if p := c.last.Load(); p != nil {
			return *p
		}
	}
	return ErrNotConnected
}

// stop ends the background attempts and waits for the current one.
func (c *connector) stop() {
	c.once.Do(func() { close(c.done) })
	c.wg.Wait()
}

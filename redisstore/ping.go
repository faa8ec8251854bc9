package redisstore

import (
	"context"
	"fmt"
)

// Ping reports whether Redis answers a PING within the store's Timeout, for
// readiness checks. On a cluster it asks one node.
func (s *Store) Ping(ctx context.Context) error {
	c := s.client()
	if c == nil {
		return fmt.Errorf("redisstore: ping: %w", s.connector.err())
	}
	ctx, cancel := s.deadlines.bound(ctx)
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}

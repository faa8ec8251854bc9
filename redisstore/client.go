package redisstore

import "github.com/redis/rueidis"

// Client returns the store's Redis client, or nil while a store built with
// ConnectLater has not connected yet, so that a program can keep data of
// its own beside the counters (the gateway keeps its per-client overrides
// there). Keys outside the store's Prefix are the caller's; the store
// still owns, and closes, a client it built.
func (s *Store) Client() rueidis.Client { return s.client() }

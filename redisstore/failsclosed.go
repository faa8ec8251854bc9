package redisstore

// FailsClosed reports whether a decision Redis could not make is a denial
// (OnError Deny). Such a denial has Degraded set and says nothing about the
// client's use of its quota; package httplimit asks this, through an
// interface of its own, to answer it as the store failing (503) rather than
// as a limit (429).
func (s *Store) FailsClosed() bool { return s.onError == Deny }

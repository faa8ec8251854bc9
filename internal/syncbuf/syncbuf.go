// Package syncbuf holds Buffer, a bytes.Buffer that goroutines may write
// and read at once: the sink a test gives a server's logger while it reads
// what has been logged so far.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it. Its methods are safe for
// concurrent use; the zero value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

package overrides

import (
	"bytes"
	"context"
	"maps"
	"sync"
)

// backend stores a Set's entries, encoded, by ID, with a version that
// changes with every change: memory or Redis.
type backend interface {
	version(ctx context.Context) (int64, error)
	load(ctx context.Context) (map[string][]byte, int64, error)
	put(ctx context.Context, id string, data []byte) error
	del(ctx context.Context, id string) (bool, error)
	// prune removes id's entry if it is still data (so that an override
	// put again meanwhile stays), and reports whether it did.
	prune(ctx context.Context, id string, data []byte) (bool, error)
}

// memory is the in-process backend.
type memory struct {
	mu sync.Mutex
	m  map[string][]byte
	v  int64
}

func (b *memory) version(context.Context) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v, nil
}

func (b *memory) load(context.Context) (map[string][]byte, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m), b.v, nil
}

func (b *memory) put(_ context.Context, id string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[id] = data
	b.v++
	return nil
}

func (b *memory) prune(_ context.Context, id string, data []byte) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.m[id]; !ok || !bytes.Equal(cur, data) {
		return false, nil
	}
	delete(b.m, id)
	b.v++
	return true, nil
}

func (b *memory) del(_ context.Context, id string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[id]
	if ok {
		delete(b.m, id)
		b.v++
	}
	return ok, nil
}

package backend

import "testing"

// Register adds b to the table until t ends: a backend that only a test
// knows, which the config loader and the server then find as they find
// memory and redis. Tests that call it must not run in parallel.
func Register(t testing.TB, b Backend) {
	t.Helper()
	if _, ok := Lookup(b.Name); ok {
		t.Fatalf("backend %q is in the table already", b.Name)
	}
	was := backends
	backends = append(All(), b)
	t.Cleanup(func() { backends = was })
}

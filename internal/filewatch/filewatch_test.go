package filewatch_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/filewatch"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func changed(t *testing.T, w *filewatch.Watcher) (string, bool) {
	t.Helper()
	data, ok, err := w.Changed()
	if err != nil {
		t.Fatalf("Changed: %v", err)
	}
	return string(data), ok
}

func TestChangedInPlaceAndByRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	write(t, path, "a")
	w := filewatch.New(path, []byte("a"), 1<<20)
	if _, ok := changed(t, w); ok {
		t.Fatal("unchanged file reported as changed")
	}
	write(t, path, "b")
	if got, ok := changed(t, w); !ok || got != "b" {
		t.Fatalf("after writing b: got %q, %v; want b, true", got, ok)
	}
	if _, ok := changed(t, w); ok {
		t.Fatal("the same change reported twice")
	}
	// An editor's save: a new file renamed over the old one.
	tmp := filepath.Join(dir, ".sluice.yaml.swp")
	write(t, tmp, "c")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got, ok := changed(t, w); !ok || got != "c" {
		t.Fatalf("after rename: got %q, %v; want c, true", got, ok)
	}
	// Touching the file without changing its content is no change.
	write(t, path, "c")
	if _, ok := changed(t, w); ok {
		t.Fatal("rewriting the same content reported as a change")
	}
}

// TestChangedSymlinkSwap replays what the kubelet does to a ConfigMap
// volume: sluice.yaml -> ..data/sluice.yaml, ..data -> ..2026_01_01; an
// update writes a new directory and renames a new ..data link over the old.
func TestChangedSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..v1"), filepath.Join(dir, "..v2")
	for _, d := range []string{v1, v2} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(v1, "sluice.yaml"), "one")
	write(t, filepath.Join(v2, "sluice.yaml"), "two")
	data := filepath.Join(dir, "..data")
	if err := os.Symlink("..v1", data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.Symlink("..data/sluice.yaml", path); err != nil {
		t.Fatal(err)
	}
	w := filewatch.New(path, []byte("one"), 1<<20)
	if _, ok := changed(t, w); ok {
		t.Fatal("unchanged ConfigMap reported as changed")
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		t.Fatal(err)
	}
	if got, ok := changed(t, w); !ok || got != "two" {
		t.Fatalf("after the swap: got %q, %v; want two, true", got, ok)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	w := filewatch.New(path, nil, 4)
	if _, _, err := w.Changed(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want an error wrapping os.ErrNotExist", err)
	}
	write(t, path, "12345")
	if _, err := w.Read(); !errors.Is(err, filewatch.ErrTooLarge) {
		t.Errorf("5 bytes with a maximum of 4: got %v, want ErrTooLarge", err)
	}
	write(t, path, "1234")
	if got, err := w.Read(); err != nil || string(got) != "1234" {
		t.Errorf("Read: %q, %v", got, err)
	}
	if _, ok := changed(t, w); ok {
		t.Error("content just read reported as changed")
	}
}

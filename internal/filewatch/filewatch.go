// Package filewatch notices when the content of a file changes, however it
// changes: written in place, replaced by a rename (as editors do), or
// replaced by the atomic symlink swap of a Kubernetes ConfigMap volume
// (the file is a link to ..data/FILE, and ..data is a link that the kubelet
// points at a new directory).
//
// It is polled: each call of Changed (the gateway makes one a second) reads
// the file through any symlinks and compares the SHA-256 of its content
// with the last one seen. Polling was
// chosen over inotify (fsnotify) because it needs no dependency, sees
// every kind of replacement above without following the directory's
// links by hand, works on filesystems that send no events (NFS, some
// container overlays), and cannot miss an event or exhaust the kernel's
// watch limits; reading a configuration file of at most a few kilobytes
// once a second costs nothing measurable, and a second of delay is well
// within what an operator waits for after changing a file.
package filewatch

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
)

// Watcher remembers the content hash of one file. It is not safe for
// concurrent use.
type Watcher struct {
	path    string
	maxSize int64
	sum     [sha256.Size]byte
}

// ErrTooLarge reports a file larger than the Watcher's maximum size.
var ErrTooLarge = errors.New("filewatch: file too large")

// New returns a Watcher of the file at path whose current content is
// known to be seen (the data the caller loaded). Files larger than maxSize
// bytes are reported with ErrTooLarge.
func New(path string, seen []byte, maxSize int64) *Watcher {
	return &Watcher{path: path, maxSize: maxSize, sum: sha256.Sum256(seen)}
}

// Read reads the file and records its content as seen.
func (w *Watcher) Read() ([]byte, error) {
	data, err := w.read()
	if err != nil {
		return nil, err
	}
	w.sum = sha256.Sum256(data)
	return data, nil
}

// Changed reads the file and reports whether its content differs from the
// last content seen; if so, the new content is recorded as seen and
// returned.
func (w *Watcher) Changed() ([]byte, bool, error) {
	data, err := w.read()
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(data)
	if sum == w.sum {
		return nil, false, nil
	}
	w.sum = sum
	return data, true, nil
}

func (w *Watcher) read() ([]byte, error) {
	f, err := os.Open(w.path) // follows symlinks: the content is what counts
	if err != nil {
		return nil, fmt.Errorf("filewatch: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, w.maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("filewatch: reading %s: %w", w.path, err)
	}
	if int64(len(data)) > w.maxSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrTooLarge, w.path, w.maxSize)
	}
	return data, nil
}

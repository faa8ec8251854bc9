package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxLineBytes is the longest log line replay reads; a longer one is
// counted as unparsed ("line too long") and skipped to its end.
const MaxLineBytes = 1 << 20

// lineReader reads the lines of one log, numbering them from 1.
type lineReader struct {
	name   string
	br     *bufio.Reader
	long   []byte // a line longer than the buffer, assembled
	n      int64  // lines read
	closer func() error
}

// openLog opens the log at path ("-" for r, the standard input), through
// gzip when its name ends in ".gz" or its first bytes are gzip's magic.
func openLog(path string, stdin io.Reader) (*lineReader, error) {
	var src io.Reader
	closer := func() error { return nil }
	name := path
	if path == "-" {
		src, name = stdin, "standard input"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if st, err := f.Stat(); err == nil && st.IsDir() {
			f.Close()
			return nil, fmt.Errorf("replay: %s: is a directory", path)
		}
		src, closer = f, f.Close
	}
	br := bufio.NewReaderSize(src, 256<<10)
	magic, _ := br.Peek(2)
	if strings.HasSuffix(path, ".gz") || bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			closer()
			return nil, fmt.Errorf("replay: %s: not a gzip file: %w", name, err)
		}
		zr.Multistream(true)
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	// A byte order mark, as some tools begin a UTF-8 file with, is not
	// part of the first line.
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte{0xef, 0xbb, 0xbf}) {
		br.Discard(3)
	}
	return &lineReader{name: name, br: br, closer: closer}, nil
}

func (r *lineReader) close() error { return r.closer() }

// next returns the next line without its line ending, valid until the next
// call, and its number. A line longer than MaxLineBytes returns
// errTooLong (its number counted, its bytes skipped). It returns io.EOF
// after the last line, or the read's error (such as a corrupt gzip
// stream) wrapped with the log's name.
func (r *lineReader) next() ([]byte, int64, error) {
	line, err := r.br.ReadSlice('\n')
	switch {
	case err == nil:
		r.n++
		return trimEOL(line), r.n, nil
	case errors.Is(err, bufio.ErrBufferFull):
		return r.longLine(line)
	case err == io.EOF && len(line) > 0:
		r.n++
		return trimEOL(line), r.n, nil
	case err == io.EOF:
		return nil, r.n, io.EOF
	}
	return nil, r.n, fmt.Errorf("replay: %s: after line %d: %w", r.name, r.n, err)
}

func (r *lineReader) longLine(first []byte) ([]byte, int64, error) {
	r.long = append(r.long[:0], first...)
	tooLong := false
	for {
		part, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.long)+len(part) > MaxLineBytes+2 {
				tooLong = true
				r.long = r.long[:0]
			} else {
				r.long = append(r.long, part...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && err != io.EOF:
			return nil, r.n, fmt.Errorf("replay: %s: after line %d: %w", r.name, r.n, err)
		}
		r.n++
		if tooLong {
			return nil, r.n, errTooLong
		}
		return trimEOL(r.long), r.n, nil
	}
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

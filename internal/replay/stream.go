package replay

import (
	"io"
	"slices"
)

// entry is a parsed line held until its turn: its Request's slices point
// into buf, which it owns. Entries are recycled, so that reading a log
// allocates nothing per line once the buffers have grown.
type entry struct {
	req  Request
	buf  []byte
	file int   // index of the log in the replay's list
	line int64 // line number in its log
	seq  uint64
}

// own copies src into e, with every slice in e.buf.
func (e *entry) own(src *Request) {
	n := len(src.Client) + len(src.Method) + len(src.Target) + len(src.Host)
	for _, h := range src.Headers {
		n += len(h.Value)
	}
	e.buf = slices.Grow(e.buf[:0], n)
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(e.buf)
		e.buf = append(e.buf, b...)
		return e.buf[start:len(e.buf):len(e.buf)]
	}
	r := &e.req
	r.Time, r.Status = src.Time, src.Status
	r.Client, r.Method, r.Target, r.Host = cp(src.Client), cp(src.Method), cp(src.Target), cp(src.Host)
	r.Headers = r.hdrs[:0]
	for _, h := range src.Headers {
		r.Headers = append(r.Headers, Header{Name: h.Name, Value: cp(h.Value)})
	}
}

// source is one log read in time order: lines are held until no line
// within the tolerance can come before them, and released sorted by time
// (lines of equal time in the order they were logged).
type source struct {
	idx    int
	lr     *lineReader
	parse  func([]byte, *Request) error
	tmp    Request
	pend   []*entry // sorted by (time, seq) from head
	head   int
	newest int64
	eof    bool
	seq    uint64
	tol    int64 // ns
}

// lineSink is told about the lines of a source that are not replayed.
type lineSink interface {
	unparsed(file int, line int64, why parseError)
	readError(file int, err error)
	newEntry() *entry
}

// next returns the source's next entry in time order, or nil at its end.
func (s *source) next(sink lineSink) *entry {
	for {
		if s.head < len(s.pend) && (s.eof || s.pend[s.head].req.Time <= s.newest-s.tol) {
			e := s.pend[s.head]
			s.pend[s.head] = nil
			if s.head++; s.head == len(s.pend) {
				s.head, s.pend = 0, s.pend[:0]
			}
			return e
		}
		if s.eof {
			return nil
		}
		line, n, err := s.lr.next()
		switch {
		case err == io.EOF:
			s.eof = true
			continue
		case err == errTooLong:
			sink.unparsed(s.idx, n, errTooLong)
			continue
		case err != nil:
			// A read error (a truncated gzip stream, say) ends the log
			// where it happened; what was read is replayed.
			sink.readError(s.idx, err)
			s.eof = true
			continue
		case len(line) == 0:
			sink.unparsed(s.idx, n, errEmpty)
			continue
		}
		if err := s.parse(line, &s.tmp); err != nil {
			pe, ok := err.(parseError) // the parsers return no other errors
			if !ok {
				pe = errSyntax
			}
			sink.unparsed(s.idx, n, pe)
			continue
		}
		e := sink.newEntry()
		e.own(&s.tmp)
		e.file, e.line, e.seq = s.idx, n, s.seq
		s.seq++
		s.insert(e)
		s.newest = max(s.newest, e.req.Time)
	}
}

// insert adds e to the pending entries in order; lines mostly come in
// order, so it is found from the back.
func (s *source) insert(e *entry) {
	if len(s.pend) == cap(s.pend) && s.head > len(s.pend)/2 {
		// Reuse the front instead of growing.
		n := copy(s.pend, s.pend[s.head:])
		clear(s.pend[n:])
		s.pend, s.head = s.pend[:n], 0
	}
	s.pend = append(s.pend, e)
	for i := len(s.pend) - 1; i > s.head && s.pend[i-1].req.Time > e.req.Time; i-- {
		s.pend[i-1], s.pend[i] = s.pend[i], s.pend[i-1]
	}
}

package replay

import "io"

// entry is a line held until its turn: a copy of the line and its time,
// and nothing else, so that the lines held within the tolerance take
// little memory (and cache). It is parsed whole when its turn comes.
// Entries are recycled, so that reading a log allocates nothing per line
// once the buffers have grown.
type entry struct {
	buf  []byte
	time int64 // ns since the epoch
	file int   // index of the log in the replay's list
	line int64 // line number in its log
	seq  uint64
}

// lineParser reads one log format.
type lineParser interface {
	// timeOf returns a line's time, reading no more of it than it must.
	timeOf(line []byte) (int64, error)
	// parse parses a whole line into req. Its errors are parseErrors.
	parse(line []byte, req *Request) error
}

// source is one log read in time order: lines are held until no line
// within the tolerance can come before them, and released sorted by time
// (lines of equal time in the order they were logged).
type source struct {
	idx    int
	lr     *lineReader
	p      lineParser
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
	freeEntry(*entry)
}

// next returns the source's next entry in time order, or nil at its end.
func (s *source) next(sink lineSink) *entry {
	for {
		if s.head < len(s.pend) && (s.eof || s.pend[s.head].time <= s.newest-s.tol) {
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
		t, err := s.p.timeOf(line)
		if err != nil {
			sink.unparsed(s.idx, n, asParseError(err))
			continue
		}
		e := sink.newEntry()
		e.buf = append(e.buf[:0], line...)
		e.time, e.file, e.line, e.seq = t, s.idx, n, s.seq
		s.seq++
		s.insert(e)
		s.newest = max(s.newest, t)
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
	for i := len(s.pend) - 1; i > s.head && s.pend[i-1].time > e.time; i-- {
		s.pend[i-1], s.pend[i] = s.pend[i], s.pend[i-1]
	}
}

// asParseError returns err as the parseError it is (the parsers return no
// other errors), or errSyntax.
func asParseError(err error) parseError {
	if pe, ok := err.(parseError); ok {
		return pe
	}
	return errSyntax
}

package replay

import (
	"bufio"
	"io"
	"strconv"
	"time"
)

// genLog writes n lines of a combined-format log of a public API: clients
// from a pool of the given size (203.0.x.y and 198.51.x.y), most of them
// reading /api/items/N and /api/search?q=..., some posting /login and
// /api/orders, starting at start with rate lines per second of the log's
// time. It is deterministic.
func genLog(w io.Writer, n, clients, rate int, start time.Time) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte
	x := uint64(0x9e3779b97f4a7c15)
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	var stamp []byte
	lastSec := int64(-1)
	for i := 0; i < n; i++ {
		sec := int64(i / rate)
		if sec != lastSec {
			lastSec = sec
			stamp = start.Add(time.Duration(sec)*time.Second).UTC().AppendFormat(stamp[:0], "02/Jan/2006:15:04:05 -0700")
		}
		c := int(rnd() % uint64(clients))
		b = b[:0]
		if c&1 == 0 {
			b = append(b, "203.0."...)
		} else {
			b = append(b, "198.51."...)
		}
		b = strconv.AppendInt(b, int64(c>>9&255), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(c>>1&255), 10)
		b = append(b, " - - ["...)
		b = append(b, stamp...)
		b = append(b, "] \""...)
		switch r := rnd() % 100; {
		case r < 50:
			b = append(b, "GET /api/items/"...)
			b = strconv.AppendUint(b, rnd()%10000, 10)
		case r < 80:
			b = append(b, "GET /api/search?q=term"...)
			b = strconv.AppendUint(b, rnd()%1000, 10)
		case r < 90:
			b = append(b, "GET /static/app.js"...)
		case r < 95:
			b = append(b, "POST /api/orders"...)
		case r < 98:
			b = append(b, "POST /login"...)
		default:
			b = append(b, "GET /healthz"...)
		}
		b = append(b, " HTTP/1.1\" 200 "...)
		b = strconv.AppendUint(b, 200+rnd()%5000, 10)
		b = append(b, ` "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"`...)
		b = append(b, '\n')
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

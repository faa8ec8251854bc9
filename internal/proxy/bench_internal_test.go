package proxy

import (
	"bufio"
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// cannedUpstream answers every request on every connection with the same
// bytes, parsing nothing but the blank line that ends a bodiless request,
// so that a benchmark's allocations are the proxy's.
func cannedUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 91\r\n\r\n" +
		`{"ok":true,"items":[1,2,3],"note":"a small JSON answer of about one hundred bytes......."}` + "\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if bytes.Equal(line, []byte("\r\n")) {
						if _, err := c.Write(resp); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// discardWriter is a ResponseWriter that keeps nothing but its header.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkProxy proxies a GET of the gateway benchmark's kind (an API
// key, a client's X-Forwarded-For) to a real upstream over loopback, on
// the direct path and on the general one, calling the handler in process.
func BenchmarkProxy(b *testing.B) {
	target, _ := url.Parse("http://" + cannedUpstream(b))
	for _, name := range []string{"direct", "general"} {
		b.Run(name, func(b *testing.B) {
			p := New(target, Options{Logger: slog.New(slog.DiscardHandler)})
			if name == "general" {
				p.pool = nil
			}
			r := httptest.NewRequest("GET", "/api/search?q=x", nil)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("X-Api-Key", "key-1")
			r.Header.Set("X-Forwarded-For", "10.1.2.3")
			r.Header.Set("User-Agent", "wrk")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				p.ServeHTTP(w, r)
			}
		})
	}
}

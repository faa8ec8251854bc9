// The access log: one JSON line per decision.

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/internal/rls"
)

// AccessLogOptions configure the access log: one JSON object a line per
// decision of a rule (the gateway's, forward-auth's) or of a descriptor
// (the rate-limit service's), in the form log shippers read as is
// (Filebeat's and Vector's ndjson, Fluent Bit's json parser, Loki's
// json stage): every line a complete object, its time in RFC 3339 with
// nanoseconds, in UTC.
type AccessLogOptions struct {
	// Output is "stdout", or the path of a file the log is appended to.
	// Required.
	Output string
	// LinesPerSecond bounds the lines written; the others are counted
	// in sluice_access_log_suppressed_total. Default 1000.
	LinesPerSecond int64
	// MaxSize rotates the file once it would grow past this many bytes:
	// it is renamed PATH.1 (PATH.1 to PATH.2, and so on) and a new one
	// begun. Default 0: only on SIGHUP (Reopen), for logrotate.
	MaxSize int64
	// MaxBackups is how many rotated files are kept. Default 5.
	MaxBackups int
	// RawKeys logs the keys as they are. By default a key is logged as
	// key_hash, a digest that is the same for the same key within one
	// process (HMAC-SHA256 with a secret made at start).
	RawKeys bool
}

// accessLine is one line of the access log.
type accessLine struct {
	Time time.Time `json:"time"`
	// Face is "gateway" (the gateway and forward-auth) or "service".
	Face    string `json:"face"`
	Rule    string `json:"rule"`
	Domain  string `json:"domain,omitempty"`
	Outcome string `json:"outcome"`
	Key     string `json:"key,omitempty"`
	KeyHash string `json:"key_hash,omitempty"`
	// Client is the address of the connection the request came on.
	Client    string `json:"client,omitempty"`
	Cost      int64  `json:"cost"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// RetryAfter is in seconds, for a refusal.
	RetryAfter float64 `json:"retry_after,omitempty"`
	// Decision is the time spent deciding the request, in seconds.
	Decision float64 `json:"decision_seconds"`
	Degraded bool    `json:"degraded,omitempty"`
}

// accessLog writes the access log. It is safe for concurrent use.
type accessLog struct {
	opts    AccessLogOptions
	limit   loglimit.Limit
	dropped prometheus.Counter
	hashKey func(string) string

	mu  sync.Mutex
	out io.Writer // os.Stdout or the file
	f   *rotatingFile
	enc *json.Encoder
}

func newAccessLog(opts AccessLogOptions, reg prometheus.Registerer, hashKey func(string) string) (*accessLog, error) {
	if opts.LinesPerSecond == 0 {
		opts.LinesPerSecond = 1000
	}
	if opts.MaxBackups <= 0 {
		opts.MaxBackups = 5
	}
	a := &accessLog{opts: opts, limit: loglimit.Limit{Per: opts.LinesPerSecond}, hashKey: hashKey}
	switch opts.Output {
	case "":
		return nil, errors.New("server: the access log has no output (stdout or a file's path)")
	case "stdout":
		a.out = os.Stdout
	default:
		f, err := openRotating(opts.Output, opts.MaxSize, opts.MaxBackups)
		if err != nil {
			return nil, fmt.Errorf("server: access log: %w", err)
		}
		a.f, a.out = f, f
	}
	a.enc = json.NewEncoder(a.out)
	a.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_access_log_suppressed_total",
		Help: "Access log lines dropped by log.access.lines_per_second.",
	})
	reg.MustRegister(a.dropped)
	return a, nil
}

// write writes one line, if the rate allows.
func (a *accessLog) write(l *accessLine) {
	if !a.limit.Allow(l.Time) {
		a.dropped.Inc()
		return
	}
	if !a.opts.RawKeys && l.Key != "" {
		l.KeyHash, l.Key = a.hashKey(l.Key), ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.enc.Encode(l) // a full disk loses lines, not decisions
}

// gateway logs a gateway request's rule decisions.
func (a *accessLog) gateway(r *http.Request, e *httplimit.Event) {
	now := time.Now().UTC()
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	for i := range e.Rules {
		re := &e.Rules[i]
		l := accessLine{Time: now, Face: "gateway", Rule: re.Rule, Outcome: re.Outcome.String(), Key: re.Key, Client: client,
			Cost: 1, Limit: re.Decision.Limit, Remaining: re.Decision.Remaining, Decision: e.Latency.Seconds(), Degraded: re.Decision.Degraded}
		if re.Outcome == httplimit.OutcomeLimited {
			l.RetryAfter = re.Decision.RetryAfter.Seconds()
		}
		a.write(&l)
	}
}

// service logs a rate-limit service request's descriptor decisions.
func (a *accessLog) service(ctx context.Context, e *rls.Event) {
	now := time.Now().UTC()
	var client string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		client, _, _ = net.SplitHostPort(p.Addr.String())
	}
	for i := range e.Descriptors {
		d := &e.Descriptors[i]
		if d.Name == "" {
			continue
		}
		l := accessLine{Time: now, Face: "service", Rule: d.Name, Domain: e.Domain, Outcome: string(d.Outcome), Key: d.Key, Client: client,
			Cost: d.Hits, Limit: d.Decision.Limit, Remaining: d.Decision.Remaining, Decision: e.Latency.Seconds(), Degraded: d.Decision.Degraded}
		if d.Outcome == rls.OutcomeLimited {
			l.RetryAfter = d.Decision.RetryAfter.Seconds()
		}
		a.write(&l)
	}
}

// reopen reopens the log's file (on SIGHUP, after logrotate moved it).
func (a *accessLog) reopen() error {
	if a.f == nil {
		return nil
	}
	return a.f.reopen()
}

func (a *accessLog) close() error {
	if a.f == nil {
		return nil
	}
	return a.f.close()
}

// rotatingFile is a file appended to, renamed aside once it would grow
// past maxSize (if positive), keeping backups of them. It is safe for
// concurrent use.
type rotatingFile struct {
	path    string
	maxSize int64
	backups int

	mu   sync.Mutex
	f    *os.File
	size int64
}

func openRotating(path string, maxSize int64, backups int) (*rotatingFile, error) {
	r := &rotatingFile{path: path, maxSize: maxSize, backups: backups}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write appends p, rotating first if p would take the file past maxSize.
func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxSize > 0 && r.size > 0 && r.size+int64(len(p)) > r.maxSize {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate renames PATH.i to PATH.i+1, the oldest dropped, and PATH to
// PATH.1, and begins PATH anew.
func (r *rotatingFile) rotate() error {
	r.f.Close()
	r.f = nil
	for i := r.backups - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1)) // absent ones are fine
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return r.open()
}

func (r *rotatingFile) reopen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	return r.open()
}

func (r *rotatingFile) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

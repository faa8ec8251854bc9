// Package replay decides access logs with a configuration, as `sluice
// serve` would have decided their requests, and reports who would have
// been limited: per rule, the requests matched, admitted, limited and
// delayed, the clients, the top limited ones and the limited requests per
// minute; with suggestions (each client's peak rate over a rule's period,
// and the smallest limit that limits at most a given share of clients);
// and, against a second configuration, the clients one limits and the
// other does not.
//
// Each log line is rebuilt into the request the gateway would have seen
// (method, target, Host, the headers the line carries, the client's
// address as the connection's) and decided by the same httplimit.Limiter
// that `sluice serve` builds from the configuration, on an in-memory store
// whose clock is set to each line's time. The results are those the
// gateway would have given the same requests in the same order at the same
// times, and do not depend on how fast the replay runs. Logs are read in
// time order: lines up to Options.Tolerance out of order are sorted; a
// line older still is decided at the latest time already reached (the
// clock never goes back) and counted as late.
package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/memstore"
)

// Options configure a replay. Config and at least one log are required;
// the zero value of every other field is a documented default.
type Options struct {
	// Config is the configuration whose rules decide the requests: its
	// rules, tiers, lists, client_ip and identity sections, as `sluice
	// serve` reads them. Its upstream, listeners and store backend are
	// ignored: the replay decides on an in-memory store of the same
	// max_keys.
	Config *config.Config
	// ConfigName names Config in the report (its file's path).
	ConfigName string
	// Against, if set, is a second configuration (the one in force, say)
	// that decides the same requests on a store of its own; the report
	// compares the clients each limits.
	Against *config.Config
	// AgainstName names Against in the report.
	AgainstName string
	// Logs are the paths of the access logs, "-" for Stdin, each read
	// through gzip when its name ends in ".gz" or it starts with gzip's
	// magic bytes. Several logs are merged by time, so rotated files and
	// the logs of several gateways alike replay as one stream.
	Logs []string
	// Stdin is read for the log "-". Default: none (an empty log).
	Stdin io.Reader
	// Format is the logs' format. Default Combined.
	Format Format
	// JSONFields names the fields of JSON lines (see JSONFields).
	JSONFields JSONFields
	// Tolerance is how far out of time order a log's lines may be and
	// still be decided in order: each line is held until a line this much
	// later has been read. Default 0: none, for logs written in order (the
	// command's default is 5 s).
	Tolerance time.Duration
	// Suggest computes each rule's suggestion (RuleReport.Suggest).
	Suggest bool
	// MaxClientsLimited is, for suggestions, the largest share of a
	// rule's clients that the suggested limit may limit, from 0 to 1.
	// Default 0.001 (0.1%).
	MaxClientsLimited float64
	// Top is how many clients the report lists per rule and comparison.
	// Default 10.
	Top int
}

// MaxListedLines is the most unparsed and late lines a report lists by
// number; every one is counted.
const MaxListedLines = 100

// Run replays the logs and returns the report. It returns an error for
// options it cannot run with (errors.Is ErrUsage), a configuration the
// limiter refuses, or a log it cannot open; a log that breaks off (a
// truncated gzip stream) is replayed up to the break and the report says
// so in ReadErrors. It stops early when ctx is done, with ctx's error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	r, err := newRun(opts)
	if err != nil {
		return nil, err
	}
	return r.do(ctx)
}

// newRun checks opts and fills in their defaults.
func newRun(opts Options) (*run, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("%w: no configuration", ErrUsage)
	}
	if len(opts.Logs) == 0 {
		return nil, fmt.Errorf("%w: no log", ErrUsage)
	}
	if opts.Tolerance < 0 {
		return nil, fmt.Errorf("%w: negative tolerance %v", ErrUsage, opts.Tolerance)
	}
	if opts.MaxClientsLimited == 0 {
		opts.MaxClientsLimited = 0.001
	}
	if opts.MaxClientsLimited < 0 || opts.MaxClientsLimited > 1 {
		return nil, fmt.Errorf("%w: the share of clients limited must be from 0 to 1, not %v", ErrUsage, opts.MaxClientsLimited)
	}
	if opts.Top <= 0 {
		opts.Top = 10
	}
	r := &run{opts: opts, rep: &Report{Config: opts.ConfigName, Format: opts.Format.String(), ToleranceSeconds: opts.Tolerance.Seconds()}}
	for i := range opts.Logs {
		r.rep.Logs = append(r.rep.Logs, r.logName(i))
	}
	return r, nil
}

// do runs the replay r was made for.
func (r *run) do(ctx context.Context) (*Report, error) {
	opts := r.opts
	var err error
	if r.cur, err = newDecider(opts.Config, opts.Suggest); err != nil {
		return nil, err
	}
	if opts.Against != nil {
		if r.old, err = newDecider(opts.Against, false); err != nil {
			return nil, fmt.Errorf("%s: %w", opts.AgainstName, err)
		}
	}
	defer r.close()
	srcs := make([]*source, len(opts.Logs))
	for i, path := range opts.Logs {
		lr, err := openLog(path, opts.Stdin)
		if err != nil {
			return nil, err
		}
		r.readers = append(r.readers, lr)
		p, err := newParser(opts.Format, opts.JSONFields)
		if err != nil {
			return nil, err
		}
		r.parsers = append(r.parsers, p)
		srcs[i] = &source{idx: i, lr: lr, p: p, tol: int64(opts.Tolerance)}
	}
	if err := r.merge(ctx, srcs); err != nil {
		return nil, err
	}
	for _, lr := range r.readers {
		r.rep.Lines += lr.n
	}
	r.finish()
	return r.rep, nil
}

// newParser returns the line parser of a format.
func newParser(f Format, fields JSONFields) (lineParser, error) {
	switch f {
	case Combined:
		return new(combinedParser), nil
	case JSON:
		return newJSONParser(fields), nil
	case Envoy:
		return envoyParser{}, nil
	case Istio:
		return envoyParser{layout: &istioDefault}, nil
	case Caddy:
		return newCaddyParser(), nil
	}
	return nil, fmt.Errorf("%w: unknown log format %v", ErrUsage, f)
}

// run is one replay in progress.
type run struct {
	opts     Options
	rep      *Report
	cur, old *decider
	readers  []*lineReader
	parsers  []lineParser // by log
	req      Request      // the request being decided
	free     []*entry
	now      int64 // the clock: the latest time decided
	started  bool
	reasons  map[parseError]int64
	// decided, if set, is told each entry's outcome under the replayed
	// configuration (tests compare it request by request).
	decided func(e *entry, o httplimit.Outcome, delay time.Duration)
}

func (r *run) close() {
	for _, lr := range r.readers {
		lr.close()
	}
	r.cur.close()
	if r.old != nil {
		r.old.close()
	}
}

func (r *run) newEntry() *entry {
	if n := len(r.free); n > 0 {
		e := r.free[n-1]
		r.free = r.free[:n-1]
		return e
	}
	return new(entry)
}

func (r *run) freeEntry(e *entry) { r.free = append(r.free, e) }

func (r *run) unparsed(file int, line int64, why parseError) {
	r.rep.Unparsed++
	if r.reasons == nil {
		r.reasons = make(map[parseError]int64)
	}
	r.reasons[why]++
	if len(r.rep.UnparsedLines) < MaxListedLines {
		r.rep.UnparsedLines = append(r.rep.UnparsedLines, LineRef{Log: r.logName(file), Line: line, Reason: string(why)})
	}
}

func (r *run) readError(file int, err error) {
	r.rep.ReadErrors = append(r.rep.ReadErrors, err.Error())
}

func (r *run) logName(file int) string {
	if p := r.opts.Logs[file]; p != "-" {
		return p
	}
	return "standard input"
}

// merge decides the sources' entries in time order.
func (r *run) merge(ctx context.Context, srcs []*source) error {
	heads := make([]*entry, len(srcs))
	done := make([]bool, len(srcs))
	for n := 0; ; n++ {
		if n&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		best := -1
		for i, s := range srcs {
			if heads[i] == nil && !done[i] {
				if heads[i] = s.next(r); heads[i] == nil {
					done[i] = true
					continue
				}
			}
			if heads[i] != nil && (best < 0 || heads[i].time < heads[best].time) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		e := heads[best]
		heads[best] = nil
		if err := r.decide(e); err != nil {
			return err
		}
		r.free = append(r.free, e)
	}
}

// decide decides one entry with each configuration, at its time or, for a
// late one, at the latest time reached.
func (r *run) decide(e *entry) error {
	if err := r.parsers[e.file].parse(e.buf, &r.req); err != nil {
		r.unparsed(e.file, e.line, asParseError(err))
		return nil
	}
	t := e.time
	switch {
	case !r.started:
		r.started = true
		r.now = t
		r.rep.From = time.Unix(0, t).UTC()
	case t < r.now:
		r.rep.Late++
		if len(r.rep.LateLines) < MaxListedLines {
			r.rep.LateLines = append(r.rep.LateLines, LineRef{Log: r.logName(e.file), Line: e.line,
				Reason: fmt.Sprintf("%v before the latest time already decided", time.Duration(r.now-t))})
		}
		t = r.now
	default:
		r.now = t
	}
	r.rep.Requests++
	if err := r.cur.decide(&r.req, t); err != nil {
		return err
	}
	if r.decided != nil {
		r.decided(e, r.cur.outcome, r.cur.delay)
	}
	if r.old != nil {
		if err := r.old.decide(&r.req, t); err != nil {
			return err
		}
	}
	return nil
}

// decider decides requests with one configuration's limiter.
type decider struct {
	cfg   *config.Config
	lo    httplimit.Options
	clk   *clock.Fake
	store *memstore.Store
	lim   *httplimit.Limiter
	h     http.Handler
	ip    *clientip.Resolver
	st    *stats

	req  *http.Request
	vals [maxHeaders][1]string
	// need are the request headers the configuration reads (key parts,
	// tiers, lists, the forwarding header, tokens): a request is rebuilt
	// with these only. seen marks those some line carried.
	need []string
	seen []bool
	// lastName and lastIdx remember, per position in a line's headers,
	// the last name seen there and its index in need (-1: not needed):
	// parsers give the same strings line after line.
	lastName [maxHeaders]string
	lastIdx  [maxHeaders]int
	w        discardWriter
	status   int // the logged status, which the upstream answers
	now      int64
	// outcome is the request's outcome; noOutcome when no rule matched.
	outcome httplimit.Outcome
	delay   time.Duration // how long it waited its turn
}

const noOutcome httplimit.Outcome = 255

// noClaims is the identity of a configuration whose jwt key parts cannot
// be verified in a replay: every request is without a verified token.
type noClaims struct{}

func (noClaims) Claims(*http.Request, netip.Addr) map[string]string { return nil }

func newDecider(cfg *config.Config, suggest bool) (*decider, error) {
	lo, err := cfg.LimiterOptions()
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	d := &decider{cfg: cfg, lo: lo, ip: lo.ClientIP, outcome: noOutcome, need: headersRead(cfg, lo.ClientIP)}
	d.seen = make([]bool, len(d.need))
	d.st = newStats(suggest)
	d.req, _ = http.NewRequestWithContext(context.Background(), http.MethodGet, "/", nil)
	d.req.Proto, d.req.ProtoMajor, d.req.ProtoMinor = "HTTP/1.1", 1, 1
	d.req.URL = new(url.URL)
	d.w.h = make(http.Header)
	return d, nil
}

// start builds the store and limiter with the clock at t: the store counts
// its time from its creation.
func (d *decider) start(t int64) error {
	d.clk = clock.NewFake(time.Unix(0, t))
	// One shard: a shard remembers its last denial, and refuses a request
	// for that key without deciding the request's other rules. Which
	// rules a refused request counts as limited, rather than skipped,
	// would then depend on which keys share a shard, and so on the
	// store's random seed; with one shard it depends on the log alone,
	// and a report is the same every time. The replay decides on one
	// goroutine: there is no lock to spread.
	d.store = memstore.New(memstore.Options{Clock: d.clk, MaxKeys: d.cfg.Store.MaxKeys, Shards: 1})
	lo := d.lo
	lo.Store = d.store
	lo.Observer = d
	lo.Headers = httplimit.HeadersNone // no decision depends on them
	lo.Wait = func(context.Context, time.Duration) error { return nil }
	lo.Clock = d.clk // no wall clock is read per request
	if d.cfg.JWT != nil {
		io := d.cfg.JWT.Options()
		io.Clock = d.clk
		v, err := identity.New(io)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		lo.Identity = v
	} else if lo.Identity == nil {
		lo.Identity = noClaims{}
	}
	lim, err := httplimit.New(lo)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	d.lim = lim
	d.h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if d.status != 0 {
			w.WriteHeader(d.status)
		}
	}))
	d.st.init(lim)
	return nil
}

func (d *decider) close() {
	if d.store != nil {
		d.store.Close()
	}
}

// Observe collects the limiter's decision of the request being decided.
func (d *decider) Observe(_ *http.Request, e *httplimit.Event) {
	d.outcome, d.delay = e.Outcome, e.Delay
	d.st.observe(e, d.now)
}

// decide decides q at time t (ns since the epoch).
func (d *decider) decide(q *Request, t int64) error {
	if d.lim == nil {
		if err := d.start(t); err != nil {
			return err
		}
	}
	d.clk.Set(time.Unix(0, t))
	d.now = t
	d.status = q.Status
	d.outcome, d.delay = noOutcome, 0
	d.rebuild(q)
	clear(d.w.h)
	d.h.ServeHTTP(&d.w, d.req)
	d.st.request(d.outcome, d.req, d.ip)
	return nil
}

// rebuild makes d.req the request q describes. Its strings point into q's
// bytes (no copies): they are valid while q is, which is until the
// decision returns, and the limiter keeps none of them (its keys are
// copies).
func (d *decider) rebuild(q *Request) {
	r := d.req
	r.Method = methodString(q.Method)
	target := q.Target
	host := q.Host
	if len(target) > 0 && target[0] != '/' && target[0] != '*' {
		// Absolute form: "http://host/path?query".
		rest := target[bytes.IndexByte(target, ':')+3:]
		slash := bytes.IndexByte(rest, '/')
		if slash < 0 {
			host, target = rest, []byte("/")
		} else {
			host, target = rest[:slash], rest[slash:]
		}
	}
	path, query := target, []byte(nil)
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		path, query = target[:i], target[i+1:]
	}
	u := r.URL
	u.RawPath = ""
	u.Path = str(path)
	if bytes.IndexByte(path, '%') >= 0 {
		if p, err := url.PathUnescape(u.Path); err == nil {
			u.Path, u.RawPath = p, str(path)
		}
	}
	u.RawQuery = str(query)
	r.RequestURI = str(target)
	r.Host = str(host)
	r.RemoteAddr = str(q.Client)
	if len(r.Header) > 0 {
		clear(r.Header)
	}
	for i, h := range q.Headers {
		j := d.lastIdx[i]
		if !sameString(d.lastName[i], h.Name) {
			j = slices.Index(d.need, h.Name)
			d.lastName[i], d.lastIdx[i] = h.Name, j
		}
		if j < 0 {
			continue
		}
		d.seen[j] = true
		d.vals[i][0] = str(h.Value)
		r.Header[h.Name] = d.vals[i][:]
	}
}

// headersRead returns the request headers a configuration's limiter reads.
func headersRead(cfg *config.Config, ip *clientip.Resolver) []string {
	var out []string
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	part := func(k httplimit.KeyPart) {
		switch k.Source {
		case httplimit.SourceHeader:
			add(k.Name)
		case httplimit.SourceCookie:
			add("Cookie")
		case httplimit.SourceJWT:
			add("Authorization")
		}
	}
	lo := cfg.Limiter
	part(lo.Tiers.From)
	part(lo.Tiers.Client)
	part(lo.Tiers.Anchor)
	for _, li := range lo.Deny {
		part(li.Key)
	}
	for _, r := range lo.Rules {
		for _, k := range r.Key {
			part(k)
		}
		for _, li := range r.Allow {
			part(li.Key)
		}
	}
	if cfg.JWT != nil {
		add("Authorization")
	}
	if len(cfg.ClientIP.TrustedProxies) > 0 {
		add(ip.Header())
	}
	return out
}

// carried reports whether some line carried the header name, one the
// configuration reads.
func (d *decider) carried(name string) bool {
	i := slices.Index(d.need, name)
	return i >= 0 && d.seen[i]
}

// str returns b's bytes as a string without copying; see rebuild.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// methodString returns the method's name, without allocating for the
// common ones.
func methodString(m []byte) string {
	switch string(m) {
	case "GET":
		return http.MethodGet
	case "POST":
		return http.MethodPost
	case "HEAD":
		return http.MethodHead
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "PATCH":
		return http.MethodPatch
	case "OPTIONS":
		return http.MethodOptions
	}
	return string(m)
}

// discardWriter is the response writer of replayed requests: it keeps the
// headers the limiter sets (cleared before each request) and nothing else.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

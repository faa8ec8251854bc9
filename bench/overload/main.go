// Command overload measures Sluice's overload protection against an
// upstream of fixed capacity: no protection, a well-chosen static
// concurrency limit, and an adaptive one, each offered 1×, 2× and 5× the
// upstream's capacity, and 2× with the capacity halved halfway through.
//
// The upstream runs in this process: a pool of -workers workers, each
// serving one request at a time for -service (±20%), the others waiting
// their turn in order; it finishes every request it accepted, even one
// whose client has given up, as most servers do. Its capacity is
// workers/service, whatever the machine's load, since its workers sleep
// rather than compute. For each run, `sluice serve` (-sluice, built by
// run.sh) is started in front of it with the mode's rules, and the load
// is offered open loop: requests arrive at a constant rate whether or not
// the earlier ones were answered, as users and retrying clients do
// (wrk, which keeps a fixed number of connections busy, offers less as
// latency grows, and so cannot show a collapse). Each client gives up
// after -timeout. One request in ten is critical, three default, six
// sheddable, marked in the X-Priority header.
//
// Goodput counts the requests answered 200 within the client's timeout.
// See bench/notes/overload.md for results.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	sluiceBin = flag.String("sluice", "", "the sluice binary")
	workers   = flag.Int("workers", 20, "the upstream's workers")
	service   = flag.Duration("service", 200*time.Millisecond, "the upstream's service time per request (±20%)")
	duration  = flag.Duration("d", 20*time.Second, "each run's length")
	warmup    = flag.Duration("warmup", 3*time.Second, "the start of each run left out of its figures")
	timeout   = flag.Duration("timeout", 2*time.Second, "how long a client waits for an answer")
	rounds    = flag.Int("rounds", 3, "rounds of every run, interleaved")
	maxDelay  = flag.Duration("max-delay", 50*time.Millisecond, "the queue's max_delay of the static and adaptive rules")
	only      = flag.String("only", "", "run only the modes named, comma separated")
	loads     = flag.String("loads", "1,2,5,halved", "the loads to run, comma separated: multiples of the capacity, and halved (2×, the capacity halved halfway)")
	why       = flag.Bool("why", false, "print, for each run, when the critical requests that failed arrived and what they got")
	timeline  = flag.Bool("timeline", false, "print, for each run, the requests answered 200 in time by the second they arrived in")
)

func main() {
	flag.Parse()
	if *sluiceBin == "" {
		log.Fatal("-sluice: want the sluice binary (run.sh builds it)")
	}
	tmp, err := os.MkdirTemp("", "overload")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	capacity := float64(*workers) / service.Seconds()

	fmt.Printf("machine: %s, %d cores; %s\n", cpuModel(), nprocs(), time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("upstream: %d workers × %v (±20%%) = %.0f requests/s; runs of %v (first %v left out), client timeout %v, queue max_delay %v\n",
		*workers, *service, capacity, *duration, *warmup, *timeout, *maxDelay)

	var runs []run
	for _, mode := range []string{"none", "static", "adaptive"} {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), mode) {
			continue
		}
		for _, l := range strings.Split(*loads, ",") {
			if l == "halved" {
				runs = append(runs, run{mode: mode, load: 2, halve: true})
				continue
			}
			load, err := strconv.ParseFloat(l, 64)
			if err != nil {
				log.Fatalf("-loads: %q is no number", l)
			}
			runs = append(runs, run{mode: mode, load: load})
		}
	}
	table := map[string][]row{}
	for r := 1; r <= *rounds; r++ {
		fmt.Printf("round %d: load average %s\n", r, loadavg())
		// The unloaded p99 of the round: a fifth of the capacity through
		// the gateway without protection, measured again each round since
		// the machine's load changes.
		unloaded := run{mode: "none", load: 0.2}.do(tmp, capacity).p99(*warmup, *duration, nil)
		fmt.Printf("  unloaded p99 (0.2× through the gateway): %v\n", unloaded.Round(100*time.Microsecond))
		for _, rn := range runs {
			res := rn.do(tmp, capacity)
			rw := res.row(rn, capacity, unloaded)
			fmt.Printf("  %s\n", rw)
			if *why {
				res.why()
			}
			if *timeline {
				res.timeline()
			}
			table[rn.name()] = append(table[rn.name()], rw)
		}
		fmt.Printf("round %d ends: load average %s\n", r, loadavg())
	}
	fmt.Printf("\nmedians of %d rounds:\n\n", *rounds)
	fmt.Println("| protection | offered | goodput (of capacity) | p99 admitted | × unloaded p99 | critical ok | default ok | sheddable ok | settle |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, rn := range runs {
		fmt.Println(median(table[rn.name()]).markdown())
	}
}

// run is one mode at one load, halving the capacity halfway or not.
type run struct {
	mode  string  // none, static, adaptive
	load  float64 // times the capacity
	halve bool
}

func (r run) name() string {
	s := fmt.Sprintf("%s %g×", r.mode, r.load)
	if r.halve {
		s += ", halved"
	}
	return s
}

// config returns the gateway's configuration for the mode.
func (r run) config(listen, admin, upstream string) string {
	head := fmt.Sprintf("server: { listen: %s, admin: %s }\nupstream: { url: http://%s }\nlog: { rejections_per_second: 1 }\n", listen, admin, upstream)
	switch r.mode {
	case "static":
		// The well-chosen static limit: the upstream's own concurrency,
		// which keeps its workers busy and nothing queued in it.
		return head + fmt.Sprintf("rules:\n  - { name: upstream, key: [global], concurrency: %d, lease: 1m, action: delay, max_delay: %v }\n", *workers, *maxDelay)
	case "adaptive":
		// No number chosen for the upstream: every default.
		return head + fmt.Sprintf("priority: { from: header:X-Priority }\nrules:\n  - { name: upstream, concurrency: adaptive, action: delay, max_delay: %v }\n", *maxDelay)
	}
	// A shadow rule: the gateway decides every request, never refuses.
	return head + "rules:\n  - { name: observe, key: [global], algorithm: gcra, limit: 1000000000, period: 1s, action: shadow }\n"
}

// do runs r against an upstream of its own (the requests an earlier run
// left it would take minutes to serve, without protection) and returns
// what each request got.
func (r run) do(tmp string, capacity float64) *result {
	up := newPool(*workers)
	upL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	upSrv := &http.Server{Handler: up}
	go upSrv.Serve(upL)
	defer upSrv.Close() // its workers finish what they hold, in the background
	upstream := upL.Addr().String()
	listen, admin := freeAddr(), freeAddr()
	cfg := filepath.Join(tmp, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(r.config(listen, admin, upstream)), 0o600); err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(*sluiceBin, "serve", "--config", cfg)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	waitReady("http://" + admin + "/readyz")

	res := &result{halve: r.halve}
	ctx, stop := context.WithCancel(context.Background())
	var scraper sync.WaitGroup
	if r.mode == "adaptive" {
		scraper.Go(func() { res.scrapeLimit(ctx, "http://"+admin+"/metrics") })
	}
	if r.halve {
		time.AfterFunc(*duration/2, func() { up.set(*workers / 2) })
	}
	res.offer("http://"+listen+"/api", r.load*capacity, *duration)
	stop()
	scraper.Wait()
	return res
}

// sample is one request's fate.
type sample struct {
	at      time.Duration // its arrival, from the run's start
	class   string
	ok      bool // answered 200 within the client's timeout
	status  int  // 0 when the client gave up or failed
	latency time.Duration
}

type result struct {
	halve   bool
	mu      sync.Mutex
	samples []sample
	limits  []limitAt // adaptive only
}

type limitAt struct {
	at    time.Duration
	limit float64
}

var classes = [10]string{"critical", "default", "default", "default", "sheddable", "sheddable", "sheddable", "sheddable", "sheddable", "sheddable"}

// offer sends requests to url at rate a second, open loop, for d.
func (res *result) offer(url string, rate float64, d time.Duration) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	start := time.Now()
	var wg sync.WaitGroup
	sent := 0
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for range t.C {
		el := time.Since(start)
		if el >= d {
			break
		}
		for due := int(el.Seconds() * rate); sent < due; sent++ {
			class := classes[sent%len(classes)]
			wg.Go(func() {
				at := time.Since(start)
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("X-Priority", class)
				ok, status := false, 0
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok, status = err == nil && resp.StatusCode == 200, resp.StatusCode
				}
				s := sample{at: at, class: class, ok: ok, status: status, latency: time.Since(start) - at}
				res.mu.Lock()
				res.samples = append(res.samples, s)
				res.mu.Unlock()
			})
		}
	}
	wg.Wait()
}

// scrapeLimit reads the adaptive rule's limit every 100ms until ctx ends.
func (res *result) scrapeLimit(ctx context.Context, url string) {
	start := time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), `sluice_adaptive_limit{rule="upstream"} `); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					res.mu.Lock()
					res.limits = append(res.limits, limitAt{time.Since(start), f})
					res.mu.Unlock()
				}
			}
		}
		resp.Body.Close()
	}
}

// why prints when the critical requests that failed arrived (by 100ms)
// and what they got (a status, or 0 when the client gave up).
func (res *result) why() {
	type key struct {
		at     time.Duration
		status int
	}
	n := map[key]int{}
	for _, s := range res.samples {
		if s.class == "critical" && !s.ok && s.at >= *warmup {
			n[key{s.at.Truncate(100 * time.Millisecond), s.status}]++
		}
	}
	keys := make([]key, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return int(a.at - b.at) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %v:%d×%d", k.at.Seconds(), k.status, n[k])
	}
	fmt.Printf("    critical failures (arrival s:status×count):%s\n", b.String())
}

// timeline prints the requests answered 200 within the client's timeout,
// and those offered, by the second they arrived in.
func (res *result) timeline() {
	ok, n := map[int]int{}, map[int]int{}
	last := 0
	for _, s := range res.samples {
		sec := int(s.at / time.Second)
		n[sec]++
		if s.ok {
			ok[sec]++
		}
		last = max(last, sec)
	}
	var b strings.Builder
	for sec := 0; sec <= last; sec++ {
		fmt.Fprintf(&b, " %d/%d", ok[sec], n[sec])
	}
	fmt.Printf("    answered in time / offered, by second:%s\n", b.String())
}

// in reports whether s arrived in [from, to).
func in(s sample, from, to time.Duration) bool { return s.at >= from && s.at < to }

// p99 returns the 99th percentile latency of the requests answered 200
// that arrived in [from, to), of class c if c is not nil.
func (res *result) p99(from, to time.Duration, c *string) time.Duration {
	var ls []time.Duration
	for _, s := range res.samples {
		if s.ok && in(s, from, to) && (c == nil || s.class == *c) {
			ls = append(ls, s.latency)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	slices.Sort(ls)
	return ls[int(math.Ceil(0.99*float64(len(ls))))-1]
}

// row is one run's figures.
type row struct {
	name                string
	goodput             float64 // of the capacity in force
	p99                 float64 // × the unloaded p99
	p99ms               float64 // in milliseconds
	crit, def, shed     float64 // shares answered 200
	settle              time.Duration
	settled             bool // for a halved run: the p99 came back within 2× the unloaded p99
	limitBefore, limitN float64
}

// row computes the run's figures. A halved run's are those of its second
// half, against the halved capacity (its p99 once settled); the others'
// those after the warm-up.
func (res *result) row(r run, capacity float64, unloaded time.Duration) row {
	from, to := *warmup, *duration
	if r.halve {
		from, capacity = *duration/2, capacity/2
	}
	out := row{name: r.name()}
	var ok, n [3]int
	idx := map[string]int{"critical": 0, "default": 1, "sheddable": 2}
	good := 0
	for _, s := range res.samples {
		if !in(s, from, to) {
			continue
		}
		n[idx[s.class]]++
		if s.ok {
			ok[idx[s.class]]++
			good++
		}
	}
	out.goodput = float64(good) / (to - from).Seconds() / capacity
	share := func(i int) float64 {
		if n[i] == 0 {
			return math.NaN()
		}
		return float64(ok[i]) / float64(n[i])
	}
	out.crit, out.def, out.shed = share(0), share(1), share(2)
	if r.halve {
		// Settle: the time after the halving from which every 500ms
		// window's p99 stays within twice the unloaded p99.
		const step = 500 * time.Millisecond
		last := -step
		for w := from; w < to; w += step {
			if p := res.p99(w, w+step, nil); p == 0 || p > 2*unloaded {
				last = w - from
			}
		}
		out.settle, out.settled = last+step, last+step < to-from
		if len(res.limits) > 0 {
			var b, a []float64
			for _, l := range res.limits {
				switch {
				case l.at >= *warmup && l.at < from:
					b = append(b, l.limit)
				case l.at >= from+out.settle:
					a = append(a, l.limit)
				}
			}
			out.limitBefore, out.limitN = mean(b), mean(a)
		}
		// The p99 once settled: the transition is the settle time's.
		if out.settled {
			from += out.settle
		}
	}
	p := res.p99(from, to, nil)
	out.p99, out.p99ms = float64(p)/float64(unloaded), float64(p)/1e6
	return out
}

func mean(fs []float64) float64 {
	if len(fs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, f := range fs {
		s += f
	}
	return s / float64(len(fs))
}

func (r row) String() string {
	s := fmt.Sprintf("%-22s goodput %5.1f%%  p99 %4.0fms %5.2f×  critical %5.1f%%  default %5.1f%%  sheddable %5.1f%%", r.name, 100*r.goodput, r.p99ms, r.p99, 100*r.crit, 100*r.def, 100*r.shed)
	if strings.HasSuffix(r.name, "halved") {
		s += "  settle " + r.settleString()
		if !math.IsNaN(r.limitBefore) && r.limitBefore > 0 {
			s += fmt.Sprintf("  limit %.1f → %.1f", r.limitBefore, r.limitN)
		}
	}
	return s
}

func (r row) settleString() string {
	if !r.settled {
		return "never"
	}
	return r.settle.Round(100 * time.Millisecond).String()
}

func (r row) markdown() string {
	name, offered, _ := strings.Cut(r.name, " ")
	settle := ""
	if strings.HasSuffix(r.name, "halved") {
		settle = r.settleString()
		if r.limitBefore > 0 {
			settle += fmt.Sprintf(" (limit %.0f → %.0f)", r.limitBefore, r.limitN)
		}
		offered = strings.Replace(offered, ", halved", " (4× once halved)", 1)
	}
	p99, ratio := fmt.Sprintf("%.0f ms", r.p99ms), fmt.Sprintf("%.2f×", r.p99)
	if r.p99ms == 0 {
		p99, ratio = "none answered", "—"
	}
	return fmt.Sprintf("| %s | %s | %.0f%% | %s | %s | %.1f%% | %.1f%% | %.1f%% | %s |", name, offered, 100*r.goodput, p99, ratio, 100*r.crit, 100*r.def, 100*r.shed, settle)
}

// median returns the row of the median goodput, with the median of each
// figure.
func median(rs []row) row {
	med := func(f func(row) float64) float64 {
		var vs []float64
		for _, r := range rs {
			vs = append(vs, f(r))
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	out := rs[0]
	out.goodput = med(func(r row) float64 { return r.goodput })
	out.p99 = med(func(r row) float64 { return r.p99 })
	out.p99ms = med(func(r row) float64 { return r.p99ms })
	out.crit = med(func(r row) float64 { return r.crit })
	out.def = med(func(r row) float64 { return r.def })
	out.shed = med(func(r row) float64 { return r.shed })
	out.limitBefore = med(func(r row) float64 { return r.limitBefore })
	out.limitN = med(func(r row) float64 { return r.limitN })
	settled := 0
	var st []time.Duration
	for _, r := range rs {
		if r.settled {
			settled++
			st = append(st, r.settle)
		}
	}
	out.settled = settled*2 > len(rs)
	if out.settled {
		slices.Sort(st)
		out.settle = st[len(st)/2]
	}
	return out
}

// pool is the upstream: workers serving one request each at a time, for
// the service time ±20%, the others waiting in order. It serves every
// request it accepted, even one whose client has left.
type pool struct {
	mu      sync.Mutex
	workers int
	busy    int
	waiting []chan struct{}
}

func newPool(workers int) *pool { return &pool{workers: workers} }

// set changes the number of workers.
func (p *pool) set(workers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workers = workers
	for p.busy < p.workers && len(p.waiting) > 0 {
		p.busy++
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
	}
}

func (p *pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.busy < p.workers {
		p.busy++
		p.mu.Unlock()
	} else {
		ch := make(chan struct{})
		p.waiting = append(p.waiting, ch)
		p.mu.Unlock()
		<-ch
	}
	time.Sleep(time.Duration(float64(*service) * (0.8 + 0.4*rand.Float64())))
	p.mu.Lock()
	if len(p.waiting) > 0 && p.busy <= p.workers {
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
	} else {
		p.busy--
	}
	p.mu.Unlock()
	w.Write([]byte("ok\n"))
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(url string) {
	for range 200 {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("%s: not ready", url)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

func nprocs() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

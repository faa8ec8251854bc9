// Command rls is the load generator of the rate-limit service benchmark: it
// calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on one
// gRPC address from a number of concurrent callers for a while, through the
// generated client, and prints the decisions per second, the latency
// percentiles and the count of each answer. run.sh drives Sluice's service
// and envoyproxy/ratelimit with it, side by side; see BENCHMARKS.md.
//
//	rls -addr 127.0.0.1:8081 -c 64 -d 10s -domain bench -key client -values 1000
//
// With -serve ADDR it is instead the floor of the benchmark: a gRPC server
// of the same service that answers OK to every call without deciding
// anything, which no rate-limit service can outrun on the same machine
// with the same load generator. With -answer-from ADDR too, the floor
// asks the service at ADDR once, at start, and gives every call that
// answer (its statuses, limits and headers): the least a service must do
// to send the answer Sluice sends. With -redis ADDR as well, it also counts
// every call in Redis, one INCRBY of a key per descriptor value, through a
// pipelining client: the least a service must do to send that answer and
// keep its counts in Redis, which no service that decides on Redis can
// outrun.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	conc := flag.Int("c", 16, "concurrent callers")
	dur := flag.Duration("d", 10*time.Second, "how long to call")
	warm := flag.Duration("warmup", time.Second, "calls made first and not counted")
	domain := flag.String("domain", "bench", "the request's domain")
	key := flag.String("key", "client", "the descriptor entry's key")
	values := flag.Int("values", 1000, "distinct descriptor values, spread over the callers")
	serve := flag.String("serve", "", "serve the no-op floor service on this address instead of calling one")
	answerFrom := flag.String("answer-from", "", "with -serve: answer every call as the service at this address answered one, at start")
	redisAddr := flag.String("redis", "", "with -serve: count every call with an INCRBY on the Redis server at this address")
	flag.Parse()
	if *serve != "" {
		ln, err := net.Listen("tcp", *serve)
		if err != nil {
			log.Fatalf("rls: %v", err)
		}
		var f floor
		if *answerFrom != "" {
			f.answer = recordAnswer(*answerFrom, *domain, *key)
		}
		if *redisAddr != "" {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*redisAddr}, DisableCache: true})
			if err != nil {
				log.Fatalf("rls: -redis %s: %v", *redisAddr, err)
			}
			f.redis = c
		}
		g := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(g, f)
		log.Fatal(g.Serve(ln))
	}
	if *conc < 1 || *values < 1 || *dur <= 0 {
		log.Fatal("rls: -c, -values and -d must be positive")
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("rls: %v", err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)

	// One request per value, built before the clock starts.
	reqs := make([]*rlsv3.RateLimitRequest, *values)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{
			Domain: *domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: *key, Value: "v" + strconv.Itoa(i)}},
			}},
			HitsAddend: 1,
		}
	}

	run := func(d time.Duration, record bool) (lat []time.Duration, ok, over, failed int, elapsed time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for w := range *conc {
			wg.Go(func() {
				var mine []time.Duration
				var o, v, f int
				for n := w; ctx.Err() == nil; n += *conc {
					t0 := time.Now()
					resp, err := client.ShouldRateLimit(context.Background(), reqs[n%len(reqs)])
					el := time.Since(t0)
					switch {
					case err != nil:
						f++
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						o++
					default:
						v++
					}
					if record {
						mine = append(mine, el)
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				ok, over, failed = ok+o, over+v, failed+f
				mu.Unlock()
			})
		}
		wg.Wait()
		return lat, ok, over, failed, time.Since(start)
	}
	if *warm > 0 {
		run(*warm, false)
	}
	lat, ok, over, failed, elapsed := run(*dur, true)
	if len(lat) == 0 {
		log.Fatal("rls: no call completed")
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("calls=%d rps=%.0f p50_us=%.1f p99_us=%.1f ok=%d over_limit=%d errors=%d\n",
		len(lat), float64(len(lat))/elapsed.Seconds(),
		float64(pct(0.50).Nanoseconds())/1e3, float64(pct(0.99).Nanoseconds())/1e3, ok, over, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// floor answers OK to every descriptor, deciding nothing; or, with an
// answer, that answer to every call.
type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	answer *rlsv3.RateLimitResponse // read-only: marshalled by every call at once
	redis  rueidis.Client           // counts every descriptor, if set
}

// recordAnswer returns the answer of the service at addr to one request
// for a descriptor of domain and key.
func recordAnswer(addr, domain, key string) *rlsv3.RateLimitResponse {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("rls: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "answer"}}}},
		HitsAddend:  1,
	}, grpc.WaitForReady(true))
	if err != nil {
		log.Fatalf("rls: -answer-from %s: %v", addr, err)
	}
	return resp
}

func (f floor) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if f.redis != nil {
		for _, d := range req.GetDescriptors() {
			k := "floor"
			for _, e := range d.GetEntries() {
				k += ":" + e.GetValue()
			}
			if err := f.redis.Do(ctx, f.redis.B().Incrby().Key(k).Increment(int64(max(req.GetHitsAddend(), 1))).Build()).Error(); err != nil {
				return nil, err
			}
		}
	}
	if f.answer != nil {
		return f.answer, nil
	}
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

package rls

import (
	"context"
	"net"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/memstore"
)

const benchConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    value: /api
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkDecide measures a decision without the network: two
// descriptors (a per-value counter and a fixed one) on the in-memory store,
// over 1000 client addresses.
func BenchmarkDecide(b *testing.B) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	svc, err := New(Options{Store: st, Rules: newSet(b, benchConfig)})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: request(
			desc("remote_address", "10.0.0."+strconv.Itoa(i)), desc("path", "/api")).Descriptors}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := svc.Decide(context.Background(), reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
}

// BenchmarkGRPC measures a decision through gRPC over loopback, the path
// Envoy takes, with the same requests as BenchmarkDecide.
func BenchmarkGRPC(b *testing.B) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	svc, err := New(Options{Store: st, Rules: newSet(b, benchConfig)})
	if err != nil {
		b.Fatal(err)
	}
	g, _ := NewGRPCServer(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: request(
			desc("remote_address", "10.0.0."+strconv.Itoa(i)), desc("path", "/api")).Descriptors}
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := client.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
}

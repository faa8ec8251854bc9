package rls

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestJSON(t *testing.T) {
	h := start(t, Options{})
	body := `{"domain":"test","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, out := post(t, h.url, body)
		if code != want {
			t.Fatalf("request %d: status %d, want %d (%s)", i, code, want, out)
		}
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("response %q: %v", out, err)
		}
		wantOverall := ok
		if want == 429 {
			wantOverall = over
		}
		if resp.OverallCode != wantOverall || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit.GetName() != "login" {
			t.Errorf("request %d: got %v", i, &resp)
		}
	}
	for _, bad := range []string{
		`{`,
		`{"domain":"test","descriptors":[]}`,
		`{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"","value":"b"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"a"}],"hits_addend":-1}]}`,
		`{"domain":"test","unknown_field":1}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"a","value":"b"}]}],"hitsAddend":99999999999999}`,
	} {
		if code, out := post(t, h.url, bad); code != 400 {
			t.Errorf("%s: status %d, want 400 (%s)", bad, code, out)
		}
	}
	resp, err := http.Get(h.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET /json: %d, want 405", resp.StatusCode)
	}
	resp, err = http.Post(h.url+"/json", "application/json", bytes.NewReader(make([]byte, maxJSONBody+1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a body over %d bytes: %d %q, want 413 with a problem document", maxJSONBody, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Observer: m})
	for range 3 {
		h.call(t, request(desc("path", "/login"), desc("shadowed", "secret-value"), desc("unknown", "x")))
	}
	h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "made-up", Descriptors: request(desc("a", "b")).Descriptors})
	h.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "made-up"})
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"test", "test.path_/login", "allowed"}, 2},
		{[]string{"test", "test.path_/login", "limited"}, 1},
		{[]string{"test", "test.shadowed", "allowed"}, 1},
		{[]string{"test", "test.shadowed", "shadow_limited"}, 2}, // the third request is rejected: its shadow limit is only checked
		{[]string{"test", "test.shadowed", "skipped"}, 0},
		{[]string{"test", "", "no_rule"}, 3},
		{[]string{"", "", "no_rule"}, 1},
	} {
		if got := counter(t, reg, "sluice_rls_decisions_total", c.labels...); got != c.want {
			t.Errorf("decisions%v: got %v, want %v", c.labels, got, c.want)
		}
	}
	if got := counter(t, reg, "sluice_rls_requests_total", "test", "over_limit"); got != 1 {
		t.Errorf("over_limit requests: got %v, want 1", got)
	}
	if got := counter(t, reg, "sluice_rls_requests_total", "", "invalid"); got != 1 {
		t.Errorf("invalid requests of an unknown domain: got %v, want 1", got)
	}
	// No label carries a value from a request.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "secret-value") || strings.Contains(l.GetValue(), "made-up") {
					t.Errorf("%s: label %s=%q carries a value from a request", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// counter returns the value of the counter name with the label values
// (domain, then descriptor or code, then outcome), or 0 if there is none.
func counter(t *testing.T, reg *prometheus.Registry, name string, values ...string) float64 {
	names := []string{"domain", "descriptor", "outcome"}
	switch name {
	case "sluice_rls_requests_total":
		names = []string{"domain", "code"}
	case "sluice_rls_list_matches_total":
		names = []string{"domain", "list", "action"}
	}
	want := map[string]string{}
	for i, v := range values {
		want[names[i]] = v
	}
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(values) {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() != want[l.GetName()] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestHealthAndReflection(t *testing.T) {
	h := start(t, Options{})
	ctx := context.Background()
	for _, svc := range []string{"", ServiceName} {
		res, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v, %v; want SERVING", svc, res, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), ServiceName) {
		t.Errorf("reflection lists %v, want %s among them", names, ServiceName)
	}
	resp, err := http.Get(h.url + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthcheck: %d, want 200", resp.StatusCode)
	}
}

// gate is a store whose takes wait until the gate opens: calls in flight
// for the shutdown tests.
type gate struct {
	sluice.Store
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) Take(ctx context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	g.entered <- struct{}{}
	select {
	case <-g.open:
	case <-ctx.Done():
		return sluice.Decision{}, ctx.Err()
	}
	return g.Store.Take(ctx, p, key, n)
}

func TestGracefulShutdown(t *testing.T) {
	for _, finish := range []bool{true, false} {
		name := "calls finish"
		if !finish {
			name = "calls cut off"
		}
		t.Run(name, func(t *testing.T) {
			st := memstore.New(memstore.Options{})
			defer st.Close()
			g := &gate{Store: st, entered: make(chan struct{}, 4), open: make(chan struct{})}
			svc, err := New(Options{Store: g, Rules: newSet(t, testConfig)})
			if err != nil {
				t.Fatal(err)
			}
			gln, _ := net.Listen("tcp", "127.0.0.1:0")
			hln, _ := net.Listen("tcp", "127.0.0.1:0")
			ctx, cancel := context.WithCancel(context.Background())
			timeout := time.Minute // never reached when the calls finish
			if !finish {
				timeout = 50 * time.Millisecond
			}
			served := make(chan error, 1)
			go func() { served <- svc.Serve(ctx, gln, hln, timeout) }()
			conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			resps := make([]*rlsv3.RateLimitResponse, 2)
			for i := range 2 {
				wg.Go(func() {
					resps[i], errs[i] = client.ShouldRateLimit(context.Background(), request(desc("path", "/login")))
				})
			}
			<-g.entered
			<-g.entered // both calls are in flight
			// Health is watched (a stream of every change of status), so
			// that the test waits on the change itself. The watch ends as
			// soon as it has told NOT_SERVING: a graceful stop waits for
			// every stream, this one too.
			wctx, endWatch := context.WithCancel(context.Background())
			watch, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := watch.Recv(); err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health while serving: %v, %v; want SERVING", res, err)
			}
			notServing := make(chan struct{})
			go func() {
				defer close(notServing)
				for {
					res, err := watch.Recv()
					if err != nil || res.Status == healthpb.HealthCheckResponse_NOT_SERVING {
						return // a stream cut off by the stop counts too
					}
				}
			}()
			cancel()
			select {
			case <-notServing:
			case <-time.After(30 * time.Second): // a safeguard against a hang
				t.Fatal("health still SERVING 30s after the shutdown began")
			}
			endWatch()
			if finish {
				close(g.open)
			}
			wg.Wait()
			err = <-served
			for i := range 2 {
				if finish && (errs[i] != nil || resps[i].OverallCode != ok) {
					t.Errorf("call %d in flight: %v, %v; want OK", i, resps[i], errs[i])
				}
				if !finish && status.Code(errs[i]) != codes.Unavailable && status.Code(errs[i]) != codes.Canceled {
					t.Errorf("call %d cut off: %v, want Unavailable or Canceled", i, errs[i])
				}
			}
			if finish && err != nil {
				t.Errorf("Serve: %v, want nil", err)
			}
			if !finish && !errors.Is(err, ErrShutdownTimeout) {
				t.Errorf("Serve: %v, want ErrShutdownTimeout", err)
			}
			if _, err := net.DialTimeout("tcp", gln.Addr().String(), time.Second); err == nil {
				t.Error("the gRPC listener still accepts after Serve returned")
			}
			if _, err := net.DialTimeout("tcp", hln.Addr().String(), time.Second); err == nil {
				t.Error("the HTTP listener still accepts after Serve returned")
			}
		})
	}
}

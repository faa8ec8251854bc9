package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/server"
)

// On SIGTERM a gateway answers /readyz 503 at once, and keeps its admin
// listener (readiness, metrics) up while the gateway's and the service's
// listeners drain their requests in flight; the admin listener closes
// last. With a shutdown delay, every listener first keeps serving for that
// long while readiness says 503, so that load balancers stop sending
// before connections are refused.
func TestShutdownClosesTheAdminListenerLast(t *testing.T) {
	for _, delay := range []time.Duration{0, 7 * time.Second} {
		t.Run(fmt.Sprint("delay ", delay), func(t *testing.T) {
			release := make(chan struct{})
			arrived := make(chan struct{}, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					arrived <- struct{}{}
					<-release
				}
				io.WriteString(w, "finished")
			}))
			t.Cleanup(up.Close)
			unblock := sync.OnceFunc(func() { close(release) })
			o := serviceOptions(t)
			o.Upstream, o.Service.HTTP = up.URL, "127.0.0.1:0"
			o.ShutdownDelay, o.ShutdownTimeout = delay, time.Minute
			fire := make(chan time.Time)
			asked := make(chan time.Duration, 1)
			g, gw := launch(t, o, slog.LevelInfo, func(g *server.Server) {
				server.SetAfter(g, func(d time.Duration) <-chan time.Time { asked <- d; return fire })
			})
			adminAddr := strings.TrimPrefix(g.admin, "http://")
			t.Cleanup(unblock) // on failure, before the gateway stops: the drain would wait for it

			// A gateway request held by its upstream, and a /json request
			// whose body stops halfway: both in flight.
			slow := make(chan string, 1)
			go func() {
				resp, err := http.Get(g.url + "/slow")
				if err != nil {
					slow <- err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				slow <- string(b)
			}()
			<-arrived
			const jsonReq = `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`
			jc, err := net.Dial("tcp", gw.Addr(server.ListenerServiceHTTP).String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { jc.Close() })
			jc.SetReadDeadline(time.Now().Add(time.Minute)) // a safeguard
			// The server answers 100 Continue when the handler starts to
			// read the body: then the request is surely in flight.
			fmt.Fprintf(jc, "POST /json HTTP/1.1\r\nHost: sluice\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(jsonReq))
			jr := bufio.NewReader(jc)
			if line, err := jr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
				t.Fatalf("the /json request: %q %v, want 100 Continue", line, err)
			}
			if line, err := jr.ReadString('\n'); err != nil || line != "\r\n" {
				t.Fatalf("the /json request: %q %v after 100 Continue, want an empty line", line, err)
			}
			io.WriteString(jc, jsonReq[:20])

			adminServes := func(when string) {
				t.Helper()
				if r := get(t, "GET", g.admin+"/readyz", nil); r.StatusCode != 503 || !strings.Contains(readAll(r), "shutting down") {
					t.Errorf("%s: /readyz %d, want 503 shutting down", when, r.StatusCode)
				}
				if r := get(t, "GET", g.admin+"/metrics", nil); r.StatusCode != 200 || !strings.Contains(readAll(r), "sluice_config_last_reload_success_timestamp_seconds") {
					t.Errorf("%s: /metrics %d, want 200 with the metrics", when, r.StatusCode)
				}
				if r := get(t, "GET", g.admin+"/healthz", nil); r.StatusCode != 200 {
					t.Errorf("%s: /healthz %d, want 200", when, r.StatusCode)
				}
			}
			g.shutdown()
			g.logs.waitFor(t, "the shutdown to begin", func(log string) bool { return strings.Contains(log, `"msg":"sluice shutting down"`) })
			adminServes("as the shutdown begins")
			if delay > 0 {
				select {
				case d := <-asked:
					if d != delay {
						t.Errorf("the delay waited for %v, want %v", d, delay)
					}
				case <-time.After(30 * time.Second): // a safeguard
					t.Fatal("the shutdown began without waiting for its delay")
				}
				// Every listener still serves while readiness says 503.
				if r := get(t, "GET", g.url+"/", nil); r.StatusCode != 200 || !r.Close {
					t.Errorf("during the delay: the gateway answered %d, Connection: close %v; want 200, and close", r.StatusCode, r.Close)
				}
				if r := get(t, "GET", "http://"+gw.Addr(server.ListenerServiceHTTP).String()+"/healthcheck", nil); r.StatusCode != 503 {
					t.Errorf("during the delay: the service's /healthcheck %d, want 503", r.StatusCode)
				}
				if st := grpcHealth(t, gw.Addr(server.ListenerGRPC).String()); st != healthpb.HealthCheckResponse_NOT_SERVING {
					t.Errorf("during the delay: gRPC health %v, want NOT_SERVING", st)
				}
				adminServes("during the delay")
				fire <- time.Now()
			}
			adminServes("while both requests drain")
			unblock()
			if got := <-slow; got != "finished" {
				t.Errorf("the gateway request in flight: got %q, want it finished", got)
			}
			adminServes("while the /json request drains")
			io.WriteString(jc, jsonReq[20:])
			resp, err := http.ReadResponse(jr, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("the /json request in flight: %v %v, want 200", resp, err)
			}
			<-g.stopped
			if g.runErr != nil {
				t.Errorf("Run: %v", g.runErr)
			}
			// The admin listener closed last.
			if c, err := net.Dial("tcp", adminAddr); err == nil {
				c.Close()
				t.Errorf("the admin listener still accepts connections after Run returned")
			}
			if !strings.Contains(g.logs.String(), `"msg":"sluice stopped"`) {
				t.Errorf("no log line sluice stopped: %s", g.logs.String())
			}
		})
	}
}

func readAll(r *http.Response) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// grpcHealth asks the gRPC health service at addr for the server's status.
func grpcHealth(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a safeguard
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("gRPC health check: %v", err)
	}
	return res.Status
}

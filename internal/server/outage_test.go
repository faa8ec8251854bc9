package server_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// While Redis is away (from the start, and again later) a gateway keeps
// polling the per-client and the descriptor overrides, and logs their
// failure once per outage at WARN (each later failed poll at DEBUG), and
// their recovery once at INFO.
func TestOverridesOutageLoggedOncePerOutage(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	o := serviceOptions(t)
	o.Backend, o.Redis = "redis", redisstore.Options{URL: srv.URL()}
	o.OverridesPoll = 20 * time.Millisecond // a failed poll every 15 to 25ms
	g, _ := launch(t, o, slog.LevelDebug)

	type set struct{ failed, again, recovered string }
	sets := []set{
		{"reading the per-client overrides failed; the last ones read stay in force", "reading the per-client overrides failed again", "reading the per-client overrides works again"},
		{"reading the descriptor overrides failed; the last ones read stay in force", "reading the descriptor overrides failed again", "reading the descriptor overrides works again"},
	}
	count := func(log string) (warn, debug, info []int) {
		for _, s := range sets {
			warn = append(warn, logLines(log, "WARN", s.failed))
			debug = append(debug, logLines(log, "DEBUG", s.again))
			info = append(info, logLines(log, "INFO", s.recovered))
		}
		return
	}
	for outage := 1; outage <= 2; outage++ {
		_, before, _ := count(g.logs.String())
		// Five more failed polls of each set, or a second WARN line: the
		// old gateway logged one a second.
		g.logs.waitFor(t, fmt.Sprintf("outage %d: five failed polls of each set", outage), func(log string) bool {
			warn, debug, _ := count(log)
			return (debug[0] >= before[0]+5 && debug[1] >= before[1]+5) || warn[0] > outage || warn[1] > outage
		})
		warn, _, info := count(g.logs.String())
		for i, s := range sets {
			if warn[i] != outage || info[i] != outage-1 {
				t.Fatalf("outage %d: %d lines %q and %d lines %q, want %d and %d; log:\n%s", outage, warn[i], s.failed, info[i], s.recovered, outage, outage-1, g.logs.String())
			}
		}
		srv.Restart(t)
		g.logs.waitFor(t, fmt.Sprintf("the recovery from outage %d", outage), func(log string) bool {
			_, _, info := count(log)
			return info[0] >= outage && info[1] >= outage
		})
		warn, _, info = count(g.logs.String())
		for i, s := range sets {
			if warn[i] != outage || info[i] != outage {
				t.Errorf("after outage %d: %d lines %q and %d lines %q, want %d of each", outage, warn[i], s.failed, info[i], s.recovered, outage)
			}
		}
		if outage == 1 {
			srv.Stop()
		}
	}
}

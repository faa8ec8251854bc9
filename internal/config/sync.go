package config

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// syncNodes are the sync fields of a rule (rules[]) or a descriptor's
// rate_limit, as written.
type syncNodes struct {
	mode, interval *yaml.Node
}

// syncField decodes v into s if key is sync or sync_interval, the field at
// path p, and reports whether it was one of them.
func (d *decoder) syncField(key string, v *yaml.Node, p string, s *sluice.Sync, sn *syncNodes) bool {
	switch key {
	case "sync":
		sn.mode = v
		if str, ok := d.str(v, p); ok {
			m, err := sluice.ParseSyncMode(str)
			if err != nil {
				d.add(v, p, "want exact, lease or async, got %q", str)
				return true
			}
			s.Mode = m
		}
	case "sync_interval":
		sn.interval = v
		if t, ok := d.duration(v, p, time.Millisecond, time.Minute); ok {
			s.Interval = t
		}
	default:
		return false
	}
	return true
}

// checkSync reports a sync_interval without sync: async, under path.
func (d *decoder) checkSync(sn syncNodes, s sluice.Sync, path string) {
	if sn.interval != nil && s.Mode != sluice.SyncAsync {
		d.add(sn.interval, path+".sync_interval", "sync_interval is only for sync: async")
	}
}

// checkSyncAlgorithms reports a sync mode other than exact on a limit it
// cannot apply to: sliding_window, sliding_log or a calendar quota.
func (d *decoder) checkSyncAlgorithms(sn syncNodes, s sluice.Sync, limits []sluice.Limit, path string) {
	if s.Mode == sluice.SyncExact {
		return
	}
	for _, l := range limits {
		if err := s.CheckLimit(l); err != nil {
			d.add(sn.mode, path+".sync", "%s", reason(err))
			return
		}
	}
}

package server

import "testing"

// A restart-only setting that changed is reported once.
func TestRestartOnlyReportsEachSettingOnce(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Options)
	}{
		{"admin.show_keys", func(o *Options) { o.AdminShowKeys = true }},
		{"log.access", func(o *Options) { o.AccessLog = &AccessLogOptions{Output: "stdout"} }},
		{"tracing", func(o *Options) { o.Tracing = &TracingOptions{Endpoint: "http://127.0.0.1:4318"} }},
		{"store.max_keys", func(o *Options) { o.MaxKeys = 5 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var run, file Options
			tt.edit(&file)
			got := restartOnly(run, file)
			if len(got) != 1 || got[0].name != tt.name {
				t.Errorf("restartOnly = %+v, want one setting %s", got, tt.name)
			}
		})
	}
}

package main

import (
	"strconv"
	"testing"
)

// TestJSONCanBeTurnedOff: with LIMITKIT_JSON_ENABLED=false, POST /json is
// not found (404), and /healthcheck still answers; the control is the
// default, where /json answers 200.
func TestJSONCanBeTurnedOff(t *testing.T) {
	body := `{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"off"}]}]}`
	for _, enabled := range []bool{true, false} {
		in := start(t, envoyEnv(t, "LIMITKIT_JSON_ENABLED", strconv.FormatBool(enabled)))
		want := 404
		if enabled {
			want = 200
		}
		if code, out := in.post(t, "/json", body); code != want {
			t.Errorf("LIMITKIT_JSON_ENABLED=%v: /json answered %d %s, want %d", enabled, code, out, want)
		}
		if code, _ := in.post(t, "/healthcheck", ""); code != 200 {
			t.Errorf("LIMITKIT_JSON_ENABLED=%v: /healthcheck answered %d, want 200", enabled, code)
		}
		_ = in.stop()
	}
}

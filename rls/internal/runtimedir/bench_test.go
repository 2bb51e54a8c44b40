package runtimedir

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPollIdle5000 is one check of an unchanged directory of 5,000
// small files, where events cannot be had (polling): "stat" reads none of
// them (stats unchanged since long ago), "read" reads every one as the
// poller did before. Per op is the CPU one poll interval costs.
func BenchmarkPollIdle5000(b *testing.B) {
	root := b.TempDir()
	for i := range 5000 {
		p := filepath.Join(root, "config", fmt.Sprintf("f%d.yaml", i))
		writeB(b, p, fmt.Sprintf("domain: d%d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i))
	}
	o := Options{Root: root, AppDirectory: "config"}
	b.Run("stat", func(b *testing.B) {
		w := o.watcher(o.Read())
		w.poll()
		// Out of the racy window, as files written long ago.
		for k, c := range w.cache {
			c.readAt = c.readAt.Add(time.Hour)
			w.cache[k] = c
		}
		for b.Loop() {
			w.poll()
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			o.readCached(nil)
		}
	})
}

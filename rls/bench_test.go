package rls

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkShouldRateLimit measures a decision on the memory store, in
// process: one descriptor, and three in one request.
func BenchmarkShouldRateLimit(b *testing.B) {
	rules := mustRules(b, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 10000, algorithm: sliding_counter}
`)
	svc, err := New(memStore(b), rules)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"desc", func(b *testing.B) {
			req := request("d", 0, desc("a", "x"), desc("b", "x"), desc("c", "x"))
			req.Descriptors = req.Descriptors[:n]
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

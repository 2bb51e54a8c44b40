package main

import (
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The reference's MERGE_DOMAIN_CONFIG and QUOTA_MODE, read by the binary:
// each test runs with the setting off (the control) and on.

const mergeA = `domain: merged
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
`

const mergeB = `domain: merged
descriptors:
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 1}
`

func TestMergeDomainConfig(t *testing.T) {
	for _, merge := range []string{"false", "true"} {
		t.Run("MERGE_DOMAIN_CONFIG="+merge, func(t *testing.T) {
			root, config := runtimeDir(t)
			writeFile(t, filepath.Join(config, "a.yaml"), mergeA)
			writeFile(t, filepath.Join(config, "b.yaml"), mergeB)
			env := baseEnv(root)
			env["MERGE_DOMAIN_CONFIG"] = merge
			env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true"
			in := start(t, env)
			resp, err := in.ask("merged", []string{"b"}, []string{"b"})
			if merge == "false" {
				if err == nil {
					t.Fatalf("one domain in two files was loaded without MERGE_DOMAIN_CONFIG: %v", resp)
				}
				return
			}
			if err != nil {
				t.Fatalf("merged domain: %v", err)
			}
			// Both files' limits apply: b is 1 per hour.
			if _, err := in.ask("merged", []string{"a"}); err != nil {
				t.Fatal(err)
			}
			resp, err = in.ask("merged", []string{"a"})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("second call on a (limit 1 of file a) = %v, %v; want OVER_LIMIT", resp.GetOverallCode(), err)
			}
		})
	}
}

const quotaYAML = `domain: quota
descriptors:
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: large
    rate_limit: {unit: hour, requests_per_unit: 100}
`

func TestQuotaModeSetting(t *testing.T) {
	for _, quota := range []string{"false", "true"} {
		t.Run("QUOTA_MODE="+quota, func(t *testing.T) {
			root, config := runtimeDir(t)
			writeFile(t, filepath.Join(config, "q.yaml"), quotaYAML)
			env := baseEnv(root)
			env["QUOTA_MODE"] = quota
			in := start(t, env)
			if _, err := in.ask("quota", []string{"small"}); err != nil {
				t.Fatal(err)
			}
			// small is spent, large is not: quota mode lets the request pass.
			resp, err := in.ask("quota", []string{"small"}, []string{"large"})
			if err != nil {
				t.Fatal(err)
			}
			want := rlsv3.RateLimitResponse_OVER_LIMIT
			if quota == "true" {
				want = rlsv3.RateLimitResponse_OK
			}
			if resp.OverallCode != want {
				t.Fatalf("overall = %v, want %v (statuses %v)", resp.OverallCode, want, resp.Statuses)
			}
			if got := resp.Statuses[0].Code; got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("small's status = %v, want OVER_LIMIT in either mode", got)
			}
			if quota == "true" {
				if logs := in.logs.String(); strings.Contains(logs, `name=QUOTA_MODE`) {
					t.Fatalf("QUOTA_MODE still logged as ignored:\n%s", logs)
				}
			}
		})
	}
}

package rls

import (
	"bytes"
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/clock"
)

// maxFuzzError bounds an error's length: an error names the field and
// shortens what it quotes, never echoing a large input back.
const maxFuzzError = 2048

// FuzzParseConfig: any bytes parse or fail with a short error, without a
// panic; a config that parses compiles or fails likewise.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(eachYAML))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 5}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        shadow_mode: true\n        rate_limit: {unit: hour, requests_per_unit: 0}\n"))
	f.Add([]byte("domain: &a d\ndescriptors: [*a]\n"))
	f.Add([]byte("{\"domain\": \"d\", \"descriptors\": [{\"key\": \"k\"}]}"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra}\n    replaces: [{name: x}]\n    name: x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("config.yaml", data)
		if err != nil {
			if n := len(err.Error()); n > maxFuzzError {
				t.Fatalf("error of %d bytes for %d bytes of input: %.200s", n, len(data), err)
			}
			return
		}
		if _, err := Compile(cfg); err != nil && len(err.Error()) > maxFuzzError {
			t.Fatalf("Compile: error of %d bytes: %.200s", len(err.Error()), err)
		}
	})
}

// fuzzYAML is the config the request fuzz target decides against: nested
// descriptors, a value match, several algorithms, a shadow limit.
const fuzzYAML = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: b
    value: v
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_log}
  - key: c
    descriptors:
      - key: e
        rate_limits:
          - {unit: second, requests_per_unit: 3, algorithm: gcra}
          - {unit: hour, requests_per_unit: 9, algorithm: sliding_counter}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// fuzzRequest builds a ShouldRateLimit request from data: the first byte
// is the request's hits_addend, then descriptors separated by '|', each of
// entries "key=value" separated by ';', a descriptor's "#n" its hits and
// "!n" its limit override.
func fuzzRequest(domain string, data []byte) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	if len(data) > 0 {
		req.HitsAddend, data = uint32(data[0]%8), data[1:]
	}
	for _, part := range bytes.Split(data, []byte("|")) {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range bytes.Split(part, []byte(";")) {
			switch {
			case len(e) > 0 && e[0] == '#':
				d.HitsAddend = wrapperspb.UInt64(uint64(len(e)-1) * 3)
			case len(e) > 0 && e[0] == '!':
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(len(e) - 1), Unit: typev3.RateLimitUnit(1 + len(e)%4)}
			default:
				k, v, _ := bytes.Cut(e, []byte("="))
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: string(k), Value: string(v)})
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// FuzzShouldRateLimit: a request built from any bytes, decided against
// an in-memory service, gets an answer with one status per descriptor or
// a short error, never a panic; asked again at once, it is not admitted
// where it was refused (nothing was given back in between).
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("d", []byte("\x00a=x"))
	f.Add("d", []byte("\x01a=x|b=v|c=1;e=2"))
	f.Add("d", []byte("\x00c=;e=|s=q;#1"))
	f.Add("d", []byte("\x00a=x;!5|b=v;#2"))
	f.Add("other", []byte("\x00a=x"))
	f.Add("d", []byte("\x00|||"))
	f.Add("", []byte(""))
	rules, err := NewRules(File{Name: "config.yaml", Data: []byte(fuzzYAML)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain string, data []byte) {
		svc, err := New(memStore(t), rules, WithClock(clock.NewFake(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		req := fuzzRequest(domain, data)
		first, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if n := len(err.Error()); n > maxFuzzError {
				t.Fatalf("error of %d bytes: %.200s", n, err)
			}
			return
		}
		if len(first.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(first.GetStatuses()), len(req.GetDescriptors()))
		}
		again, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("the same request again: %v", err)
		}
		if first.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && again.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			t.Fatalf("refused, then admitted at the same time: %v then %v", first, again)
		}
	})
}

// Package storetest is the conformance suite for backend.Store
// implementations. Every store in limitkit passes it, and a third-party store
// runs it with one call:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, mystore.New(...))
//	}
//
// The suite drives the store directly, with the time of each request chosen
// by the suite (a fake clock), through the step tables written out by hand in
// every registered algorithm's Examples (window boundaries,
// same-millisecond bursts, cost N, exact RetryAfter and ResetAfter, Peek),
// through tables whose limit and window change from step to step (a
// limit lowered and raised, two limits interleaved on one key as in a
// rolling reload, late requests, a window shortened), the exact log's for
// every algorithm whose descriptor promises its decisions
// (algorithms.Exact) and the descriptor's own Changes for the others,
// through generic cases run for every registered algorithm (Reset,
// independent keys, expiry, the clock jumping back 5 s and forward an
// hour), through hostile key ids and
// bad input, through concurrent callers on one key, and through a long random
// sequence compared decision by decision with the algorithms' Go engine;
// and TakeAll (several rules on several keys, all or nothing) through a
// guard table, a random sequence against the Go engine, every request's
// own result (backend.TakeEach) and concurrent callers; units given back by
// time (backend.UnitRefunder, when the store has it) against the Go
// engine; and the life of concurrency leases (a store must be a
// backend.LeaseStore). Each
// case uses its own key prefix, so one store can serve the whole suite.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Reporter receives the suite's failures; *testing.T is one.
type Reporter interface {
	Errorf(format string, args ...any)
}

// Failure is one failed check.
type Failure struct {
	// Case names the case, as Run names its subtest.
	Case string
	// Message says what was expected and what the store did.
	Message string
}

// Run runs every case against store, each as a subtest of t.
func Run(t *testing.T, store backend.Store) {
	t.Helper()
	run := newRunID()
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			c.run(&checker{ctx: t.Context(), r: t, store: store, prefix: run + c.name + ":"})
		})
	}
}

// Check runs every case against store and returns the failures; an empty
// result means the store conforms. Run is the usual entry point; Check lets a
// test show that a broken store is caught.
func Check(ctx context.Context, store backend.Store) []Failure {
	run := newRunID()
	var failures []Failure
	for _, c := range cases() {
		rec := &recorder{}
		c.run(&checker{ctx: ctx, r: rec, store: store, prefix: run + c.name + ":"})
		for _, m := range rec.messages {
			failures = append(failures, Failure{Case: c.name, Message: m})
		}
	}
	return failures
}

// CaseNames returns the names of the cases Run and Check run, in order;
// they follow the algorithms' registry (algorithms.Algorithms).
func CaseNames() []string {
	var names []string
	for _, c := range cases() {
		names = append(names, c.name)
	}
	return names
}

func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "storetest:" + hex.EncodeToString(b) + ":"
}

type recorder struct{ messages []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.messages = append(r.messages, fmt.Sprintf(format, args...))
}

// base is the suite's time zero: a moment aligned to every window the tables
// use, so fixed windows start at offsets that are easy to read.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type testCase struct {
	name string
	run  func(c *checker)
}

// checker runs requests for one case and reports mismatches. Its methods
// return false after a failure so that cases can stop early.
type checker struct {
	ctx    context.Context
	r      Reporter
	store  backend.Store
	prefix string
}

func (c *checker) key(id string) backend.Key { return backend.Key{Prefix: c.prefix, ID: id} }

func (c *checker) request(id string, rule algorithms.Rule, at time.Duration, cost int64) backend.Request {
	return backend.Request{Key: c.key(id), Rule: rule, Now: base.Add(at), Cost: cost}
}

func (c *checker) take(id string, rule algorithms.Rule, at time.Duration, cost int64) (backend.Result, bool) {
	res, err := c.store.Take(c.ctx, c.request(id, rule, at, cost))
	if err != nil {
		c.r.Errorf("Take(%q, %v, at %v, cost %d): unexpected error: %v", short(id), rule, at, cost, err)
		return res, false
	}
	return res, true
}

func (c *checker) peek(id string, rule algorithms.Rule, at time.Duration, cost int64) (backend.Result, bool) {
	res, err := c.store.Peek(c.ctx, c.request(id, rule, at, cost))
	if err != nil {
		c.r.Errorf("Peek(%q, %v, at %v, cost %d): unexpected error: %v", short(id), rule, at, cost, err)
		return res, false
	}
	return res, true
}

// reset resets id at the time when (a store whose keys are named by time
// deletes those around it).
func (c *checker) reset(id string, rule algorithms.Rule, when time.Duration) bool {
	if err := c.store.Reset(c.ctx, c.key(id), rule, base.Add(when)); err != nil {
		c.r.Errorf("Reset(%q, %v): unexpected error: %v", short(id), rule, err)
		return false
	}
	return true
}

// expect reports a mismatch between got and want. Cached says where an
// answer came from, not what it is, so it is not compared.
func (c *checker) expect(what string, got, want backend.Result) bool {
	got.Cached, want.Cached = false, false
	if !reflect.DeepEqual(got, want) {
		c.r.Errorf("%s:\n got  %+v\n want %+v", what, got, want)
		return false
	}
	return true
}

// short keeps failure messages readable when ids are huge.
func short(id string) string {
	if len(id) > 40 {
		return fmt.Sprintf("%s...(%d bytes)", id[:20], len(id))
	}
	return id
}

func cases() []testCase {
	var all []testCase
	all = append(all, tableCases()...)
	all = append(all, changeCases()...)
	for _, name := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: name, Limit: 5, Window: 10 * time.Second}
		for _, g := range genericCases() {
			all = append(all, testCase{
				name: g.name + "/" + string(name),
				run:  func(c *checker) { g.run(c, rule) },
			})
		}
	}
	all = append(all, multiCases()...)
	all = append(all, giveBackCases()...)
	all = append(all, chargeCases()...)
	all = append(all, leaseCases()...)
	all = append(all, testCase{name: "invalid_input", run: invalidInput})
	return all
}

// FixedWindowFloor returns the earliest time (ms) a random sequence may go
// back to while it drives a fixed window of w ms: the start of the window
// before the one holding latest, the latest time it reached. The Go engine
// keeps those two windows; Redis keeps every window's key until it
// expires, so a sequence going further back would compare a window one
// engine forgot with one the other kept.
//
// After the window's length changed, the two windows the Go engine keeps
// need not be those two: pass latest for w then (FixedWindowFloor(latest,
// 0) is latest), and the sequence does not go back at all.
func FixedWindowFloor(latest, w int64) int64 {
	if w <= 0 {
		return latest
	}
	return max(latest-latest%w-w, 0)
}

// floorFixed clamps now (a sequence's time, from base) to FixedWindowFloor
// of latest for the fixed windows among rules, and returns it with the new
// latest.
//
// fixedW is the window FixedWindowFloor is given for r: 0 (no going back)
// once a sequence changed r's window (see sameAsGoEngine).
var fixedW = func(r algorithms.Rule) int64 { return r.Window.Milliseconds() }

func floorFixed(now, latest time.Duration, rules ...algorithms.Rule) (time.Duration, time.Duration) {
	for _, r := range rules {
		if !r.PerWindow() {
			continue
		}
		floor := time.UnixMilli(FixedWindowFloor(base.Add(latest).UnixMilli(), fixedW(r))).Sub(base)
		now = max(now, floor)
	}
	return now, max(latest, now)
}

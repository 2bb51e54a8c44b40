package rediswire

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/limitkit/limitkit/algorithms"
)

// The Redis wire format: the scripts as sent (each algorithm's body from
// the registry, after algorithms.LuaPrelude, wrapped by single.lua; all of
// them at once for multi.lua and batch.lua), their ARGV and their replies.
// It lives here, not in algorithms, so that the algorithms package holds
// only math.

//go:embed single.lua
var singleLua string

//go:embed multi.lua
var multiLua string

//go:embed batch.lua
var batchLua string

//go:embed groups.lua
var groupsLua string

//go:embed memo.lua
var memoLua string

// scripts are the scripts as sent to Redis, built on first use from the
// registry (after any test-only row added through algorithms/internal/registryhook).
var scripts = sync.OnceValue(buildScripts)

// memoReads puts memo.lua under the TakeAll scripts' steps; a test turns
// it off as a control.
var memoReads = true

func buildScripts() *scriptSet {
	set := &scriptSet{single: map[algorithms.Name]string{}}
	prelude := algorithms.LuaPrelude()
	table := "local STEPS = {}\n"
	var steps string
	for _, a := range algorithms.Algorithms() {
		set.single[a.Name] = prelude + luaStep("step", a) + singleLua
		fn := "step_" + string(a.Name)
		steps += luaStep(fn, a)
		table += "STEPS['" + string(a.Name) + "'] = " + fn + "\n"
	}
	// The TakeAll scripts read each key twice (check, then take): their
	// steps see redis.call through memo.lua.
	all, memoed := prelude+steps+table, prelude+memoLua+steps+table
	if !memoReads {
		memoed = prelude + "local function memo_reset() end\n" + steps + table
	}
	set.multi = memoed + multiLua
	set.batch = BatchHead + all + "local TAKE = true\n" + batchLua
	set.peekBatch = BatchHead + all + "local TAKE = false\n" + batchLua
	set.groups = BatchHead + memoed + groupsLua
	return set
}

type scriptSet struct {
	single                          map[algorithms.Name]string
	multi, batch, peekBatch, groups string
}

// BatchHead starts the batch scripts: where their keys (K from KO + 1)
// and values (A from AO + 1) are, and how many requests there are (N).
// On one server they are KEYS and ARGV; a cluster node's batch swaps this
// line for clusterBatchHead.
const BatchHead = "local K, KO, A, AO, N = KEYS, 0, ARGV, 0, #KEYS\n"

// luaStep wraps an algorithm's body as the local function fn, with its key
// suffix in own_suffix (a fixed window names a key per window after it).
func luaStep(fn string, a *algorithms.Algorithm) string {
	return "local function " + fn + "(key, now, w, limit, cost, take, refund, at)\nlocal own_suffix = " +
		luaString(a.Suffix) + "\n" + a.Lua + "end\n"
}

// luaString quotes s as a Lua string literal: every byte as a three-digit
// decimal escape but letters, digits, ':' and '_'.
func luaString(s string) string {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ':' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
			b = append(b, c)
			continue
		}
		b = append(b, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
	}
	return string(append(b, '"'))
}

// Script returns the source of the named algorithm's single-request
// script (ARGV from Args). The error wraps algorithms.ErrInvalidRule for
// an unknown name.
func Script(name algorithms.Name) (string, error) {
	if s, ok := scripts().single[name]; ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: no Lua script for algorithm %q", algorithms.ErrInvalidRule, string(name))
}

// MultiScript returns the script that decides several requests all or
// nothing: KEYS are the requests' keys, ARGV is now (ms, or ServerTime)
// followed by each request's MultiArgs. Its reply is 1 when all were
// admitted (else 0) and ReplyLen integers per request.
func MultiScript() string { return scripts().multi }

// BatchScript returns the script that decides several independent takes
// one after the other in one call: KEYS are the requests' keys, ARGV holds
// each request's BatchArgs, or, for requests sharing a rule and cost,
// their SharedBatchArgs. Its reply holds ReplyLen values per request: a
// take's integers, or, for a request whose step failed (a key of the wrong
// type), the error in place of the first value and 0s.
func BatchScript() string { return scripts().batch }

// PeekBatchScript is BatchScript deciding peeks: it writes nothing, and is
// sent read-only (EVALSHA_RO), as a single Peek is.
func PeekBatchScript() string { return scripts().peekBatch }

// GroupsScript returns the script that decides several TakeAll calls one
// after the other in one call, each all or nothing as MultiScript decides
// it: KEYS are the calls' keys in order, ARGV holds per call its number of
// requests, now, and each request's MultiArgs. Its reply holds, per call,
// 1 when all were admitted (else 0) and ReplyLen integers per request, or
// an error in place of the first value and 0s.
func GroupsScript() string { return scripts().groups }

// ServerTime, passed as now to Args, makes the script read the Redis
// server's clock (TIME) instead of taking the time as an argument.
const ServerTime int64 = -1

// MaxTime is the latest time, in ms since the Unix epoch, the scripts
// accept (about the year 70,000). With two windows added it stays below
// 2^53, where Lua numbers stop being exact integers.
const MaxTime = int64(1)<<51 - 1

// The positions of an Outcome's fields in a script's reply for one request,
// and of where its admission was recorded (see algorithms.Rule.ChargedAt),
// which a refund must name.
const (
	ReplyAllowed = iota
	ReplyRemaining
	ReplyRetryAfter
	ReplyResetAfter
	// ReplyAt is where an admission was recorded.
	ReplyAt
	// ReplyLen is the number of integers in a reply for one request.
	ReplyLen
)

// Mode says what one call of a single-request script does.
type Mode uint8

// The modes of a single-request script.
const (
	// ModePeek reports without writing (it may run with EVALSHA_RO).
	ModePeek Mode = iota
	// ModeTake decides and, when admitted, consumes.
	ModeTake
	// ModeRefund gives back what a take admitted (see algorithms.Rule.Refund),
	// then reports as ModePeek does. Its arguments come from RefundArgs.
	// For a rule that holds leases it is a release (algorithms.Rule.Release):
	// the reply's ReplyAt is 1 when the lease was held, else 0.
	ModeRefund
	// ModeRenew renews a lease (algorithms.Rule.Renew): the script's take
	// and refund both set. Admitted with the new lease id at ReplyAt when
	// it was held; denied, with nothing changed, when not. Its arguments
	// come from RenewArgs. Rules that hold no leases only peek.
	ModeRenew
)

var modeArgs = [...]string{ModePeek: "0", ModeTake: "1", ModeRefund: "2", ModeRenew: "3"}

// Args returns the ARGV of one call of the rule's script: a step in the
// given mode (ModePeek or ModeTake; a refund's come from RefundArgs) at now (ms
// since the Unix epoch, or ServerTime) for a request of the given cost.
// The rule, cost and now must be valid; see algorithms.Rule.Validate,
// algorithms.Rule.ValidateCost and MaxTime. An unknown mode is an error.
func Args(rule algorithms.Rule, now, cost int64, mode Mode) ([]string, error) {
	if int(mode) >= len(modeArgs) {
		return nil, fmt.Errorf("rediswire: mode %d is not ModePeek (0), ModeTake (1), ModeRefund (2) or ModeRenew (3)", mode)
	}
	// One buffer and one string for the numbers, sliced into the four
	// numeric arguments.
	var buf [4 * 20]byte
	b := buf[:0]
	var ends [4]int
	for i, v := range [4]int64{now, rule.Window.Milliseconds(), rule.Limit, cost} {
		b = strconv.AppendInt(b, v, 10)
		ends[i] = len(b)
	}
	s := string(b)
	return []string{s[:ends[0]], s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]], modeArgs[mode]}, nil
}

// RefundArgs returns the ARGV of a refund of cost units that a take
// recorded at at (its reply's ReplyAt), reporting at now.
func RefundArgs(rule algorithms.Rule, now, at, cost int64) []string {
	args, _ := Args(rule, now, cost, ModeRefund) // a valid mode
	return append(args, strconv.FormatInt(at, 10))
}

// RenewArgs returns the ARGV of a renewal at now of the lease at (its id)
// of a rule that holds leases; cost is the lease's.
func RenewArgs(rule algorithms.Rule, now, at, cost int64) []string {
	args, _ := Args(rule, now, cost, ModeRenew) // a valid mode
	return append(args, strconv.FormatInt(at, 10))
}

// BatchArgs appends to args the five values batch.lua reads for a take of
// cost units of rule at now (ms, or ServerTime). buf is scratch space the
// numbers are formatted in; the returned strings share one allocation.
func BatchArgs(args []string, buf []byte, rule algorithms.Rule, now, cost int64) ([]string, []byte) {
	start := len(buf)
	var ends [4]int
	for i, v := range [4]int64{now, rule.Window.Milliseconds(), rule.Limit, cost} {
		buf = strconv.AppendInt(buf, v, 10)
		ends[i] = len(buf) - start
	}
	s := string(buf[start:])
	return append(args, s[:ends[0]], string(rule.Algorithm), s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]]), buf[:start]
}

// SharedBatchArgs appends to args the values batch.lua reads for n > 1
// takes of cost units of rule, take i at now(i) (ms, or ServerTime): the
// rule's values once, then each take's now, or, when all takes share now,
// the five values of BatchArgs once. The script decides them as it would
// n BatchArgs. buf is scratch space, as for BatchArgs.
func SharedBatchArgs(args []string, buf []byte, rule algorithms.Rule, cost int64, n int, now func(i int) int64) ([]string, []byte) {
	now0, same := now(0), true
	for i := 1; i < n && same; i++ {
		same = now(i) == now0
	}
	if same {
		return BatchArgs(args, buf, rule, now0, cost)
	}
	start := len(buf)
	var ends [3]int
	for i, v := range [3]int64{rule.Window.Milliseconds(), rule.Limit, cost} {
		buf = strconv.AppendInt(buf, v, 10)
		ends[i] = len(buf) - start
	}
	nowsAt := len(buf)
	for i := range n {
		buf = strconv.AppendInt(buf, now(i), 10)
		buf = append(buf, ' ')
	}
	// One string holds every number; each value is a slice of it.
	s := string(buf[start:])
	args = append(args, string(rule.Algorithm), s[:ends[0]], s[ends[0]:ends[1]], s[ends[1]:ends[2]])
	from := nowsAt - start
	for range n {
		end := from + strings.IndexByte(s[from:], ' ')
		args = append(args, s[from:end])
		from = end + 1
	}
	return args, buf[:start]
}

// MultiArgs appends to args the four values multi.lua reads for one
// request of rule with the given cost.
func MultiArgs(args []string, rule algorithms.Rule, cost int64) []string {
	return append(args, string(rule.Algorithm), strconv.FormatInt(rule.Window.Milliseconds(), 10),
		strconv.FormatInt(rule.Limit, 10), strconv.FormatInt(cost, 10))
}

// ClusterBatchHead starts the cluster form of a batch script, in place of
// BatchHead: ARGV[1] is the number of requests n, ARGV[2..n+1] their keys,
// and the batch's own ARGV follows; KEYS holds only the first key, for
// routing. The script reads them where they are, without copying.
const ClusterBatchHead = "local K, KO, A, AO, N = ARGV, 1, ARGV, 1 + tonumber(ARGV[1]), tonumber(ARGV[1])\n"

// ClusterBatchScript returns the cluster form of a batch script.
func ClusterBatchScript(batch string) string {
	return ClusterBatchHead + strings.TrimPrefix(batch, BatchHead)
}

// ClusterBatchCall returns the keys and ARGV of a cluster batch call for
// the batch's keys and ARGV, in dst (reused).
func ClusterBatchCall(dst, keys, args []string) (declared, argv []string) {
	argv = append(dst[:0], strconv.Itoa(len(keys)))
	argv = append(argv, keys...)
	argv = append(argv, args...)
	return keys[:1], argv
}

// WithoutMemo makes the TakeAll scripts built from now on go without
// memo.lua, for a test's control; it returns the undo.
func WithoutMemo() (undo func()) {
	memoReads = false
	scripts = sync.OnceValue(buildScripts)
	return func() {
		memoReads = true
		scripts = sync.OnceValue(buildScripts)
	}
}

package redisengine

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

var errNoScript = errors.New("NOSCRIPT No matching script")

type call struct {
	cmd         Command
	script, key string
	args        []string
}

func (f *fakeConn) EvalWait(ctx context.Context, cmd Command, script string, keys, args []string, _ int, _ time.Duration) ([]int64, int64, error) {
	vals, err := f.Eval(ctx, cmd, script, keys, args)
	return vals, f.acked, err
}

func (f *fakeConn) EvalBatch(ctx context.Context, cmd Command, script string, keys, args []string) ([]int64, []error, error) {
	vals, err := f.Eval(ctx, cmd, script, keys, args)
	return vals, nil, err
}

func (f *fakeConn) Cluster() bool { return f.cluster }

// fakeConn records calls and answers them from a queue of replies.
type fakeConn struct {
	mu      sync.Mutex
	calls   []call
	replies []fakeReply
	dels    []string
	acked   int64
	cluster bool
}

type fakeReply struct {
	vals []int64
	err  error
}

func (f *fakeConn) Eval(_ context.Context, cmd Command, script string, keys, args []string) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{cmd, script, keys[0], args})
	if len(f.replies) == 0 {
		return []int64{1, 0, 0, 1000, 1}, nil
	}
	r := f.replies[0]
	f.replies = f.replies[1:]
	return r.vals, r.err
}

func (f *fakeConn) Del(_ context.Context, key string) error {
	f.dels = append(f.dels, key)
	return nil
}

func (f *fakeConn) IsNoScript(err error) bool { return errors.Is(err, errNoScript) }

var rule = algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 5, Window: 10 * time.Second}

func request(cost int64) backend.Request {
	return backend.Request{Key: backend.Key{Prefix: "p:", ID: "u1"}, Rule: rule, Now: time.UnixMilli(1_767_225_600_123), Cost: cost}
}

func newRunner(t *testing.T, conn Conn, serverTime bool) *Runner {
	r, err := New(conn, "test", Options{ServerTime: serverTime})
	require.NoError(t, err)
	return r
}

func TestTakeSendsEvalSHA(t *testing.T) {
	f := &fakeConn{replies: []fakeReply{{vals: []int64{1, 2, 0, 10_000, 7}}}}
	r := newRunner(t, f, false)
	res, err := r.Take(t.Context(), request(3))
	require.NoError(t, err)
	require.Equal(t, backend.Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 10 * time.Second}, res)
	require.Len(t, f.calls, 1)
	c := f.calls[0]
	require.Equal(t, EvalSHA, c.cmd)
	require.Equal(t, r.SHA1(algorithms.SlidingLog), c.script)
	require.Len(t, c.script, 40)
	require.Equal(t, "p:{u1}:sl", c.key)
	require.Equal(t, []string{"1767225600123", "10000", "5", "3", "1"}, c.args)
}

func TestPeekIsReadOnly(t *testing.T) {
	f := &fakeConn{replies: []fakeReply{{err: errNoScript}}}
	r := newRunner(t, f, false)
	_, err := r.Peek(t.Context(), request(1))
	require.NoError(t, err)
	require.Len(t, f.calls, 2)
	require.Equal(t, EvalSHARO, f.calls[0].cmd)
	require.Equal(t, EvalRO, f.calls[1].cmd)
	require.Equal(t, "0", f.calls[0].args[4])
	src, err := rediswire.Script(algorithms.SlidingLog)
	require.NoError(t, err)
	require.Equal(t, src, f.calls[1].script)
}

func TestNoScriptFallsBackToEvalOnce(t *testing.T) {
	f := &fakeConn{replies: []fakeReply{{err: errNoScript}, {vals: []int64{0, 0, 500, 900, 7}}}}
	r := newRunner(t, f, false)
	res, err := r.Take(t.Context(), request(1))
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, 500*time.Millisecond, res.RetryAfter)
	require.Len(t, f.calls, 2)
	require.Equal(t, []Command{EvalSHA, Eval}, []Command{f.calls[0].cmd, f.calls[1].cmd})
	require.True(t, strings.Contains(f.calls[1].script, "ZADD"))

	// A second NOSCRIPT (from EVAL itself) is an error, not a loop.
	f = &fakeConn{replies: []fakeReply{{err: errNoScript}, {err: errNoScript}}}
	r = newRunner(t, f, false)
	_, err = r.Take(t.Context(), request(1))
	require.ErrorIs(t, err, errNoScript)
	require.Len(t, f.calls, 2)
}

func TestOtherErrorsAreNeverResent(t *testing.T) {
	for _, cause := range []error{context.DeadlineExceeded, errors.New("i/o timeout"), errors.New("EOF"), errors.New("BUSY")} {
		f := &fakeConn{replies: []fakeReply{{err: cause}}}
		r := newRunner(t, f, false)
		res, err := r.Take(t.Context(), request(1))
		require.ErrorIs(t, err, cause)
		require.Equal(t, backend.Result{}, res)
		require.Len(t, f.calls, 1, "a writing script must be sent once")
		require.Contains(t, err.Error(), "EVALSHA sliding_log")
	}
}

func TestBadRepliesAreErrors(t *testing.T) {
	f := &fakeConn{replies: []fakeReply{{vals: []int64{1, 2, 3}}, {err: rediswire.ErrBadReply}}}
	r := newRunner(t, f, false)
	_, err := r.Take(t.Context(), request(1))
	require.ErrorIs(t, err, rediswire.ErrBadReply)
	_, err = r.Take(t.Context(), request(1))
	require.ErrorIs(t, err, rediswire.ErrBadReply)
}

func TestDecode(t *testing.T) {
	good := []int64{0, 5, 10, 20, 1}
	out, err := rediswire.Decode(rule, good)
	require.NoError(t, err)
	require.Equal(t, algorithms.Outcome{Remaining: 5, RetryAfter: 10, ResetAfter: 20}, out)
	out, err = rediswire.Decode(rule, []int64{1, 0, 0, 0, 0})
	require.NoError(t, err)
	require.Equal(t, algorithms.Outcome{Allowed: true}, out)

	bad := map[string][]int64{
		"nil":                 nil,
		"empty":               {},
		"three":               {1, 2, 3},
		"four":                {1, 2, 3, 4},
		"six":                 {1, 2, 3, 4, 5, 6},
		"at < 0":              {1, 0, 0, 0, -1},
		"allowed 2":           {2, 0, 0, 0, 0},
		"allowed -1":          {-1, 0, 0, 0, 0},
		"remaining -1":        {0, -1, 0, 0, 0},
		"remaining > limit":   {1, 6, 0, 0, 0},
		"retry < 0":           {0, 0, -1, 0, 0},
		"retry when allowed":  {1, 0, 5, 0, 0},
		"retry huge":          {0, 0, math.MaxInt64, 0, 0},
		"reset < 0":           {1, 0, 0, -5, 0},
		"reset huge":          {1, 0, 0, math.MaxInt64, 0},
		"min int":             {math.MinInt64, 0, 0, 0, 0},
		"remaining max int64": {0, math.MaxInt64, 0, 0, 0},
	}
	for name, reply := range bad {
		_, err := rediswire.Decode(rule, reply)
		require.ErrorIs(t, err, rediswire.ErrBadReply, name)
	}
}

func TestInvalidInput(t *testing.T) {
	f := &fakeConn{}
	r := newRunner(t, f, false)
	req := request(0)
	_, err := r.Take(t.Context(), req)
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	req = request(1)
	req.Now = time.UnixMilli(rediswire.MaxTime + 1)
	_, err = r.Take(t.Context(), req)
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	req.Rule.Algorithm = "leaky"
	_, err = r.Peek(t.Context(), req)
	require.ErrorIs(t, err, algorithms.ErrInvalidRule)
	require.ErrorIs(t, r.Reset(t.Context(), backend.Key{ID: "x"}, algorithms.Rule{Algorithm: "leaky"}, time.Now()), algorithms.ErrInvalidRule)
	require.ErrorIs(t, r.Reset(t.Context(), backend.Key{}, rule, time.Now()), algorithms.ErrInvalidRequest)
	require.Empty(t, f.calls)
	require.Empty(t, f.dels)
	_, err = New(nil, "test", Options{})
	require.Error(t, err)
}

func TestServerTimeSendsNoTime(t *testing.T) {
	f := &fakeConn{}
	r := newRunner(t, f, true)
	req := request(1)
	req.Now = time.UnixMilli(rediswire.MaxTime + 1) // ignored
	_, err := r.Take(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, "-1", f.calls[0].args[0])
}

func TestResetDeletesTheKey(t *testing.T) {
	f := &fakeConn{}
	r := newRunner(t, f, false)
	require.NoError(t, r.Reset(t.Context(), backend.Key{Prefix: "p:", ID: "u1"}, algorithms.Rule{Algorithm: algorithms.FixedWindow}, time.Now()))
	require.Equal(t, []string{"p:{u1}:fw"}, f.dels)
}

func TestCommand(t *testing.T) {
	require.Equal(t, "EVALSHA_RO", EvalSHARO.String())
	require.True(t, EvalRO.ReadOnly())
	require.False(t, Eval.ReadOnly())
	require.True(t, EvalSHA.BySHA())
	require.False(t, EvalRO.BySHA())
	require.Contains(t, Command(9).String(), "9")
}

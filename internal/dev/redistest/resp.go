package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout bounds Server.Do, and DoContext or DoValue when their
// context has no deadline: dialing, writing the command and reading the
// reply must all finish within it.
const DefaultTimeout = 10 * time.Second

// ErrNil is returned by Do and DoContext when the reply is a nil bulk string
// or nil array, such as GET of a missing key.
var ErrNil = errors.New("redistest: nil reply")

// ReplyError is an error reply from Redis, such as
// "ERR unknown command 'FOO'" or "MOVED 12182 127.0.0.1:30001".
type ReplyError string

// Error returns the reply's text as Redis sent it.
func (e ReplyError) Error() string { return string(e) }

// maxBulk bounds the size of one bulk string the client accepts (512 MiB is
// Redis's own limit).
const maxBulk = 512 << 20

// do dials addr, sends one command and reads one reply. It returns a reply
// (see DoValue for the Go types) and, for an error reply, a ReplyError.
func do(ctx context.Context, addr string, conf *tls.Config, args []string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: no command")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	v, err := roundTrip(ctx, addr, conf, args)
	if err != nil {
		var re ReplyError
		if errors.As(err, &re) {
			return nil, re
		}
		if ctxErr := contextError(ctx, err); ctxErr != nil {
			return nil, fmt.Errorf("redistest: %s on %s: %w: %w", args[0], addr, ctxErr, err)
		}
		return nil, fmt.Errorf("redistest: %s on %s: %w", args[0], addr, err)
	}
	return v, nil
}

// contextError returns why ctx ended, when it ended and caused err. The
// connection's deadline is the context's, so a read can time out a moment
// before the context's own timer marks it done: a network timeout at or
// after the deadline counts as context.DeadlineExceeded.
func contextError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// roundTrip does do's exchange, over TLS when conf is not nil.
func roundTrip(ctx context.Context, addr string, conf *tls.Config, args []string) (any, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Cancellation without a deadline change: unblock reads and writes.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if conf != nil {
		if conf.ServerName == "" {
			conf = conf.Clone()
			conf.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = tc
	}
	if _, err := conn.Write(encodeCommand(args)); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(conn))
	if err != nil {
		return nil, err
	}
	if re, ok := v.(ReplyError); ok {
		return nil, re
	}
	return v, nil
}

// encodeCommand renders args as a RESP array of bulk strings.
func encodeCommand(args []string) []byte {
	n := 16
	for _, a := range args {
		n += len(a) + 16
	}
	b := make([]byte, 0, n)
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// readReply reads one RESP2 reply: a string (simple or bulk), an int64, a
// []any, nil, or a ReplyError (returned as a value so that errors nested in
// arrays, as in EXEC, keep their place).
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return ReplyError(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed integer reply %q", body)
		}
		return n, nil
	case '$':
		return readBulk(r, body)
	case '*':
		return readArray(r, body)
	default:
		return nil, fmt.Errorf("unsupported reply type %q", kind)
	}
}

// readBulk reads a bulk string of the length body; -1 is nil.
func readBulk(r *bufio.Reader, body string) (any, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n < -1 || n > maxBulk {
		return nil, fmt.Errorf("malformed bulk length %q", body)
	}
	if n == -1 {
		return nil, nil
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return nil, errors.New("malformed bulk string terminator")
	}
	return string(buf[:n]), nil
}

// readArray reads an array of the length body; -1 is nil.
func readArray(r *bufio.Reader, body string) (any, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n < -1 || n > maxBulk {
		return nil, fmt.Errorf("malformed array length %q", body)
	}
	if n == -1 {
		return nil, nil
	}
	arr := make([]any, n)
	for i := range arr {
		if arr[i], err = readReply(r); err != nil {
			return nil, err
		}
	}
	return arr, nil
}

// formatReply renders a reply as text: strings as they are, integers in
// decimal, nil as "", and arrays as their elements' text, one a line.
func formatReply(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case ReplyError:
		return string(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = formatReply(e)
		}
		return strings.Join(parts, "\n")
	default:
		return fmt.Sprint(v)
	}
}

// infoField returns the value of "name:value" in an INFO reply, and whether
// the field is present.
func infoField(info, name string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}

// pairsToMap turns a flat [field, value, field, value...] reply, as returned
// by SENTINEL MASTER, into a map of text values.
func pairsToMap(v any) (map[string]string, error) {
	arr, ok := v.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("want a flat array of field/value pairs, got %T %v", v, v)
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i < len(arr); i += 2 {
		m[formatReply(arr[i])] = formatReply(arr[i+1])
	}
	return m, nil
}

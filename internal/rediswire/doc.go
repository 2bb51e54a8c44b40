// Package rediswire is the Redis wire format of limitkit's Redis stores:
// the key names (key.go), the Lua scripts as sent and their ARGV
// (wire.go), and the checks that turn a script's reply into an outcome
// (reply.go).
//
// The engine that sends them (EVALSHA, batching, native fixed windows,
// refunds) lives with the stores, in backend/internal/redisengine. The
// format lives here, at the root, because tools and tests outside backend/
// read it too: cmd/limitkit-inspect names the scripts in SLOWLOG, the
// benchmark floors and the accuracy tool replay them, and tests read
// counts under the stores' keys.
package rediswire

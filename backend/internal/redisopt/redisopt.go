// Package redisopt is the one definition of the Redis stores' options.
// backend/goredisstore and backend/rueidisstore each declare a thin typed
// face over it (their Option type and With* funcs), so that both stores
// default, check and name their options alike; a test holds the two faces'
// doc comments equal.
package redisopt

import (
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
)

// Config is what the options set: the script runner's options.
type Config struct {
	Script redisengine.Options
}

// DefaultBatch is the stores' DefaultBatch.
const DefaultBatch = redisengine.DefaultBatch

// ServerTime is the stores' WithServerTime.
func ServerTime() func(*Config) {
	return func(c *Config) { c.Script.ServerTime = true }
}

// ReplicaAck is the stores' WithReplicaAck.
func ReplicaAck(replicas int, timeout time.Duration, onShort backend.OnShortAck) func(*Config) {
	return func(c *Config) {
		c.Script.Ack = redisengine.Ack{Replicas: replicas, Timeout: timeout, OnShort: onShort}
	}
}

// Batching is the stores' WithBatching.
func Batching(max int) func(*Config) {
	return func(c *Config) { c.Script.Batch = max }
}

// Resolve applies opts, in order, over the defaults and checks what
// redisengine.New does not (there a batch of 0 means none); store names the
// store in errors ("goredisstore").
func Resolve[O ~func(*Config)](store string, opts []O) (redisengine.Options, error) {
	c := Config{Script: redisengine.Options{Batch: DefaultBatch}}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.Script.Batch < 1 {
		return redisengine.Options{}, fmt.Errorf("%s: batch size %d is below 1; 1 sends each Take alone", store, c.Script.Batch)
	}
	return c.Script, nil
}

//go:build redis

package main

import "github.com/limitkit/limitkit/examples/internal/stores"

// Built with -tags redis, the quickstart can also run its demonstration on
// Redis (-redis URL), through either client library.
func init() { openRedis = stores.Redis }

//go:build redis

package main

import (
	"context"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
)

// Built with -tags redis, the quickstart can also run its demonstration on
// Redis (-redis URL), through either client library.
func init() { openRedis = redisStore }

// redisStore opens the Redis at url (any URL backend/storeurl reads: one
// server, a cluster, Sentinel) through the client library named, go-redis
// or rueidis, and checks that it answers.
func redisStore(url, client string) (backend.Store, func(), error) {
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, nil, err
	}
	return opened.Store, func() { _ = opened.Close() }, nil
}

// Package stores opens the Redis store the examples use when run with
// -redis URL, through the client library named by -client.
package stores

import (
	"context"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
)

// Clients lists the values of the -client flag.
const Clients = "go-redis or rueidis"

// URLForms lists the Redis URLs -redis takes, for flag help texts.
const URLForms = "redis://host:port/db, rediss://..., redis+cluster://host:port?addr=host2:port2, " +
	"redis+sentinel://host:port?addr=host2:port2&master_name=NAME"

// Redis connects to the Redis named by url, in any of the forms
// backend/storeurl reads (a single server, a cluster, a sentinel group;
// see URLForms), with the named client library, "go-redis" or "rueidis",
// checks that it answers, and returns a store over it and a function that
// closes the client.
func Redis(url, client string) (backend.Store, func(), error) {
	opened, err := storeurl.Open(context.Background(), url, storeurl.WithClient(client))
	if err != nil {
		return nil, nil, err
	}
	return opened.Store, func() { _ = opened.Close() }, nil
}

// Open returns the store an example keeps its state in: a new memory store
// when url is empty, else the Redis store at url through client; a phrase
// saying where the state is; and a function that closes it.
func Open(url, client string) (backend.Store, string, func(), error) {
	if url == "" {
		s, err := memorystore.New()
		return s, "in memory", func() {}, err
	}
	s, closeStore, err := Redis(url, client)
	return s, "in Redis (" + client + ")", closeStore, err
}

// Package stores opens the Redis store the examples use when run with
// -redis URL, through the client library named by -client.
package stores

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
)

// Clients lists the values of the -client flag.
const Clients = "go-redis or rueidis"

// Redis connects to the Redis server at url (redis://host:port/db) with the
// named client library, "go-redis" or "rueidis", and returns a store over
// it and a function that closes the client.
func Redis(url, client string) (backend.Store, func(), error) {
	switch client {
	case "go-redis":
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, err
		}
		c := redis.NewClient(opts)
		s, err := goredisstore.New(c)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return s, func() { _ = c.Close() }, nil
	case "rueidis":
		opts, err := rueidis.ParseURL(url)
		if err != nil {
			return nil, nil, err
		}
		c, err := rueidis.NewClient(opts)
		if err != nil {
			return nil, nil, err
		}
		s, err := rueidisstore.New(c)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, c.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown client %q: use %s", client, Clients)
}

// Command coreonly imports only limiter and memorystore: the test in
// limiter/deps_test.go checks that it links no third-party code.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

func main() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Second})
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(context.Background(), "k")
	fmt.Println(d.Allowed, err)
}

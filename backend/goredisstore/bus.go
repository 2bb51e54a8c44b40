package goredisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Bus sends and receives messages over Redis pub/sub through a go-redis
// client. It is the denycache.Bus that carries a deny cache's invalidations
// between processes; on a cluster client, PUBLISH reaches every node.
type Bus struct{ c redis.UniversalClient }

// NewBus returns a Bus over c.
func NewBus(c redis.UniversalClient) *Bus { return &Bus{c: c} }

// Publish sends msg to channel.
func (b *Bus) Publish(ctx context.Context, channel, msg string) error {
	return b.c.Publish(ctx, channel, msg).Err()
}

// Listen calls fn with each message on channel until ctx ends or the
// connection fails. It does not reconnect: a listener that reconnected could
// not know what it missed, so the caller decides what to do.
func (b *Bus) Listen(ctx context.Context, channel string, fn func(msg string)) error {
	ps := b.c.Subscribe(ctx, channel)
	defer ps.Close()
	// A blocked read does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		switch m := m.(type) {
		case *redis.Message:
			fn(m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				return errors.New("goredisstore: the pub/sub subscription ended")
			}
		}
	}
}

package rueidisstore

import (
	"context"

	"github.com/redis/rueidis"
)

// Bus sends and receives messages over Redis pub/sub through a rueidis
// client. It is the denycache.Bus that carries a deny cache's invalidations
// between processes; on a cluster client, PUBLISH reaches every node.
type Bus struct{ c rueidis.Client }

// NewBus returns a Bus over c.
func NewBus(c rueidis.Client) *Bus { return &Bus{c: c} }

// Publish sends msg to channel.
func (b *Bus) Publish(ctx context.Context, channel, msg string) error {
	return b.c.Do(ctx, b.c.B().Publish().Channel(channel).Message(msg).Build()).Error()
}

// Listen calls fn with each message on channel until ctx ends or the
// connection fails.
func (b *Bus) Listen(ctx context.Context, channel string, fn func(msg string)) error {
	return b.c.Receive(ctx, b.c.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
		fn(m.Message)
	})
}

package rueidisstore

import (
	"context"
	"errors"

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

// errSubscriptionEnded reports a subscription the server ended without an
// error on the connection.
var errSubscriptionEnded = errors.New("rueidisstore: the pub/sub subscription ended")

// Listen calls fn with each message on channel until ctx ends or the
// connection fails. It does not reconnect: a listener that reconnected could
// not know what it missed, so the caller decides what to do. (Hence a
// dedicated connection: rueidis' Receive re-subscribes by itself after a
// connection error, and the messages published meanwhile are lost
// unnoticed.)
func (b *Bus) Listen(ctx context.Context, channel string, fn func(msg string)) error {
	dc, release := b.c.Dedicate()
	defer release() // a connection with pub/sub hooks is closed, not reused
	ended := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { fn(m.Message) },
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-ended:
		if err == nil {
			err = errSubscriptionEnded
		}
		return err
	}
}

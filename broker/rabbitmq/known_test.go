package rabbitmq

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Only a copy that may have met a sender before is worth the sender's peek.
func TestKnownPeeksOnlyAtCopiesThatMayHaveBeenSeen(t *testing.T) {
	for _, c := range []struct {
		name string
		d    amqp.Delivery
		peek bool
	}{
		{"first delivery of a first publish", amqp.Delivery{}, false},
		{"redelivered after a consumer died", amqp.Delivery{Redelivered: true}, true},
		{"back from the retry queue", amqp.Delivery{Headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1)}}}}, true},
		{"back after a backoff", amqp.Delivery{Headers: amqp.Table{HeaderBackoffs: int64(1)}}, true},
		{"split from a redelivered bundle", amqp.Delivery{Headers: amqp.Table{HeaderRedelivered: true}}, true},
	} {
		k := known(c.d)
		if k == nil || k.Delivery != c.peek || k.ProfileRead {
			t.Errorf("%s: known %+v, want Delivery %v and no profile", c.name, k, c.peek)
		}
	}
}

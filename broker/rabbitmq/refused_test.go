package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testmq"
)

// What the broker refuses for herald's own settings (a wrong password, no
// such vhost, a queue declared with other arguments) is told apart from a
// connection that failed (nothing listening): the first is logged as an
// error naming the settings, the second as a warning.
func TestTheBrokersRefusalsAreToldApart(t *testing.T) {
	t.Parallel()
	good, err := url.Parse(testmq.VHost(t))
	if err != nil {
		t.Fatal(err)
	}
	wrongPassword, noVhost, nothing := *good, *good, *good
	wrongPassword.User = url.UserPassword(good.User.Username(), "not-the-password")
	noVhost.Path = "/herald-no-such-vhost"
	nothing.Host = "127.0.0.1:1"
	ctx := context.Background()
	for name, c := range map[string]struct {
		url     url.URL
		refused bool
	}{"WrongPassword": {wrongPassword, true}, "NoSuchVhost": {noVhost, true}, "NothingListening": {nothing, false}} {
		conn, _, err := dial(ctx, c.url.String(), "refused-test")
		if err == nil {
			conn.Close()
			t.Fatalf("%s: dialled", name)
		}
		if got := refusedSetup(fmt.Errorf("session: %w", err)); got != c.refused {
			t.Errorf("%s: refusedSetup(%v) = %v, want %v", name, err, got, c.refused)
		}
	}
	// A queue declared again with other arguments closes the channel with
	// PRECONDITION_FAILED, which the session loop sees through errClosed.
	ch := testmq.Channel(t, good.String())
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if _, err := ch.QueueDeclare("refused-test", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare("refused-test", true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	if err == nil || !refusedSetup(errClosed(<-closed)) || !refusedSetup(err) {
		t.Fatalf("a queue declared with other arguments: %v; want a refusal told apart", err)
	}
	if refusedSetup(errors.New("rabbitmq: connection closed")) {
		t.Fatal("a closed connection was told a refusal")
	}
	// A consumer's acknowledgement that timed out is a failed
	// precondition too, but not herald's settings.
	ackTimeout := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out"}
	if refusedSetup(errClosed(ackTimeout)) {
		t.Fatal("an acknowledgement's timeout was told a refusal of herald's settings")
	}
}

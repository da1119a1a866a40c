package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/consumer"
)

// TestEventWithoutIDIsRefusedBeforeAnyWrite: an event with no ID can never
// be processed, so every entry point refuses it with ErrNoEventID, which a
// caller tells apart from "not processed, deliver again" (redelivering it
// would fail the same way for ever), and touches no database: each is
// given none, so a call to it would panic.
func TestEventWithoutIDIsRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := consumer.Event{Consumer: "points", Payload: []byte(`{"points":120}`)}
	ran := false
	effect := func(context.Context) error { ran = true; return nil }
	for name, call := range map[string]func() (consumer.Outcome, error){
		"Process": func() (consumer.Outcome, error) {
			return consumer.Process(ctx, nil, ev, func(ctx context.Context, _ pgx.Tx) error { return effect(ctx) })
		},
		"ProcessSQL": func() (consumer.Outcome, error) {
			return consumer.ProcessSQL(ctx, nil, ev, func(ctx context.Context, _ *sql.Tx) error { return effect(ctx) })
		},
		"HandlePgx": func() (consumer.Outcome, error) { return consumer.HandlePgx(ctx, nil, ev, effect) },
		"HandleSQL": func() (consumer.Outcome, error) { return consumer.HandleSQL(ctx, nil, ev, effect) },
	} {
		out, err := call()
		if !errors.Is(err, consumer.ErrNoEventID) || out != consumer.None {
			t.Errorf("%s = %v, %v; want None and ErrNoEventID", name, out, err)
		}
		var mismatch *consumer.MismatchError
		if errors.As(err, &mismatch) {
			t.Errorf("%s: %v is a mismatch, which callers ack", name, err)
		}
	}
	if ran {
		t.Error("the effect ran for an event without an ID")
	}
}

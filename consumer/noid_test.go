package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
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

// TestEventWithAnIDNoDatabaseTakesIsRefusedAsHavingNone: an ID that can
// never be recorded (not UTF-8, a NUL, only spaces, longer than the
// index takes) failed at the database on every delivery, an error the
// documented handler requeued, so the message came back at once for ever
// (a walk's consumer sat at 44% CPU). It is refused before any write as
// ErrNoEventID, which the handler dead-letters, and the error does not
// repeat the ID. A nil database is an error, not a panic.
func TestEventWithAnIDNoDatabaseTakesIsRefusedAsHavingNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	effect := func(context.Context, pgx.Tx) error { t.Error("the effect ran"); return nil }
	for name, id := range map[string]string{
		"NotUTF8": "bad\xff", "NUL": "nul\x00x", "Newline": "a\nb", "Spaces": "   ",
		"TooLong": strings.Repeat("x", consumer.MaxEventIDBytes+1),
	} {
		out, err := consumer.Process(ctx, nil, consumer.Event{Consumer: "points", ID: id, Payload: []byte(`{}`)}, effect)
		if !errors.Is(err, consumer.ErrNoEventID) || out != consumer.None {
			t.Errorf("%s: Process = %v, %v; want None and ErrNoEventID", name, out, err)
		}
		if err != nil && len(id) > 3 && strings.Contains(err.Error(), id) {
			t.Errorf("%s: the error repeats the ID: %v", name, err)
		}
	}
	ok := consumer.Event{Consumer: "points", ID: strings.Repeat("é", consumer.MaxEventIDBytes/2), Payload: []byte(`{}`)}
	if _, err := consumer.Process(ctx, nil, ok, effect); errors.Is(err, consumer.ErrNoEventID) || err == nil {
		t.Errorf("an ID of %d bytes with no database = %v; want the nil database's error", len(ok.ID), err)
	}
	if err := consumer.Migrate(ctx, nil); err == nil {
		t.Error("Migrate(nil) = nil; want an error")
	}
	if _, err := consumer.HandleSQL(ctx, nil, ok, func(context.Context) error { return nil }); err == nil || errors.Is(err, consumer.ErrNoEventID) {
		t.Errorf("HandleSQL(nil tx) = %v; want the nil database's error", err)
	}
}

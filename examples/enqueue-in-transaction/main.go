// Command enqueue-in-transaction is the clinic of docs/enqueue.md, "Enqueue in
// your own transaction": it confirms a booking and, in the same PostgreSQL
// transaction, enqueues the booking's confirmation and a reminder the day
// before. herald, on the same database, sends them.
//
// Run it from this directory, on a database herald has migrated:
//
//	export HERALD_DATABASE=postgres://herald@127.0.0.1:5432/clinic
//	herald migrate --config herald.yaml
//	go run .
//	herald serve --config herald.yaml
//
// Running it again confirms the same booking again, which adds nothing.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald"
)

func main() {
	if err := run(context.Background(), os.Getenv("HERALD_DATABASE"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "enqueue-in-transaction:", err)
		os.Exit(1)
	}
}

// Booking is the clinic's own record.
type Booking struct {
	ID        string
	PatientID string
	At        time.Time
}

// run books an appointment three days ahead (once) and confirms it.
func run(ctx context.Context, databaseURL string, out io.Writer) error {
	if databaseURL == "" {
		return errors.New("set HERALD_DATABASE to herald's PostgreSQL URL, as for herald serve")
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// README:begin client
	client, err := herald.NewClient(herald.Options{KindsFile: "kinds.yaml"}) // the file herald reads
	if err != nil {
		return err
	}
	// README:end

	// The clinic's own table, in herald's database (the clinic migrates it).
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bookings (
	id         text PRIMARY KEY,
	patient_id text NOT NULL,
	at         timestamptz NOT NULL,
	status     text NOT NULL DEFAULT 'REQUESTED'
)`); err != nil {
		return fmt.Errorf("create bookings: %w", err)
	}
	day := time.Now().AddDate(0, 0, 3)
	at := time.Date(day.Year(), day.Month(), day.Day(), 10, 30, 0, 0, time.Local)
	if _, err := pool.Exec(ctx, `INSERT INTO bookings (id, patient_id, at) VALUES ('booking-42', 'patient-1', $1)
ON CONFLICT (id) DO NOTHING`, at); err != nil {
		return fmt.Errorf("book: %w", err)
	}
	b := Booking{ID: "booking-42"}
	if err := pool.QueryRow(ctx, `SELECT patient_id, at FROM bookings WHERE id = $1`, b.ID).Scan(&b.PatientID, &b.At); err != nil {
		return fmt.Errorf("read booking: %w", err)
	}
	if err := confirm(ctx, pool, client, b); err != nil {
		return fmt.Errorf("confirm %s: %w", b.ID, err)
	}
	_, err = fmt.Fprintf(out, "%s confirmed: herald sends its confirmation now and a reminder on %s\n",
		b.ID, b.At.AddDate(0, 0, -1).Format("Jan 2 15:04"))
	return err
}

// README:begin confirm
// confirm marks the booking confirmed and enqueues its confirmation and a
// reminder the day before, in one transaction: all three commit, or none.
func confirm(ctx context.Context, pool *pgxpool.Pool, client *herald.Client, b Booking) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE bookings SET status = 'CONFIRMED' WHERE id = $1`, b.ID); err != nil {
			return err
		}
		intent := herald.Intent{Tenant: "clinic-7", Recipient: b.PatientID, EventID: b.ID,
			Kind: "booking.confirmed", Params: map[string]any{"at": b.At.Format("Jan 2 15:04")},
			DedupKey: b.ID + ":confirmed"}
		if _, err := client.EnqueueTx(ctx, tx, intent); err != nil {
			return err
		}
		reminder := intent
		reminder.Kind, reminder.DedupKey = "booking.reminder", b.ID+":reminder-d1"
		reminder.SendAt, reminder.ExpiresAt = b.At.AddDate(0, 0, -1), b.At // SCHEDULED until then
		_, err := client.EnqueueTx(ctx, tx, reminder)
		return err
	})
}

// README:end

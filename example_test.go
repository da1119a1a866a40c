package herald_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/store/sqlite"
)

// clinicKindsFile holds the kinds of the clinic example: the file its
// application reads (herald.Options.KindsFile) and its herald.yaml names
// (kinds_file), so both know the same kinds.
const (
	clinicKindsFile  = "examples/enqueue-in-transaction/kinds.yaml"
	clinicConfigFile = "examples/enqueue-in-transaction/herald.yaml"
)

// A clinic confirms a booking and, in the same transaction, enqueues its
// confirmation and two reminders (the day before and the same morning). A
// declined booking rolls back and leaves neither the booking nor any
// notification; confirming the same booking again adds nothing. Then herald,
// on the same database, sends the confirmation and keeps the reminders
// SCHEDULED. This runs on herald's embedded SQLite; on PostgreSQL use
// EnqueueTx (pgx) or EnqueueSQLTx, which also wake herald on commit.
func Example_enqueueInTransaction() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "herald-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "clinic.db")

	// herald's tables and the clinic's own, in one database.
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE bookings (id TEXT PRIMARY KEY, patient TEXT NOT NULL, at TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	client, err := herald.NewClient(herald.Options{KindsFile: clinicKindsFile})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	at := time.Date(now.Year(), now.Month(), now.Day()+3, 10, 30, 0, 0, time.Local)
	morning := time.Date(at.Year(), at.Month(), at.Day(), 7, 30, 0, 0, time.Local)

	// confirm is the clinic's booking step: one transaction, three intents.
	confirm := func(booking string, declined bool) ([]herald.Enqueued, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() // after Commit, a no-op
		if _, err := tx.ExecContext(ctx, `INSERT INTO bookings (id, patient, at) VALUES (?, ?, ?)
ON CONFLICT (id) DO NOTHING`, booking, "patient-1", at.Format(time.RFC3339)); err != nil {
			return nil, err
		}
		base := herald.Intent{
			Tenant: "clinic-7", Recipient: "patient-1", EventID: booking,
			Params: map[string]any{"at": at.Format("Jan 2 15:04")},
		}
		confirmation, dayBefore, sameMorning := base, base, base
		confirmation.Kind, confirmation.DedupKey = "booking.confirmed", booking+":confirmed"
		dayBefore.Kind, dayBefore.DedupKey, dayBefore.SendAt, dayBefore.ExpiresAt = "booking.reminder", booking+":reminder-d1", at.AddDate(0, 0, -1), at
		sameMorning.Kind, sameMorning.DedupKey, sameMorning.SendAt, sameMorning.ExpiresAt = "booking.reminder", booking+":reminder-d0", morning, at
		var out []herald.Enqueued
		for _, in := range []herald.Intent{confirmation, dayBefore, sameMorning} {
			e, err := client.EnqueueSQLiteTx(ctx, tx, in)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if declined {
			return nil, errors.New("the slot was taken meanwhile") // rolls back the booking and the intents
		}
		return out, tx.Commit()
	}

	first, err := confirm("booking-42", false)
	if err != nil {
		log.Fatal(err)
	}
	again, err := confirm("booking-42", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first run created:", first[0].Created, first[1].Created, first[2].Created)
	fmt.Println("second run created:", again[0].Created, again[1].Created, again[2].Created,
		"same ids:", again[0].ID == first[0].ID && again[1].ID == first[1].ID && again[2].ID == first[2].ID)

	_, err = confirm("booking-43", true)
	var bookings, notifications int
	if err := db.QueryRowContext(ctx, `SELECT
    (SELECT count(*) FROM bookings WHERE id = 'booking-43'),
    (SELECT count(*) FROM notifications WHERE event_id = 'booking-43')`).Scan(&bookings, &notifications); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("declined booking-43 (%v): bookings %d, notifications %d\n", err, bookings, notifications)

	// herald itself, on the same database, from the example's herald.yaml:
	// its kinds from the same kinds file, a simulated provider.
	cfg, err := config.Load(clinicConfigFile, func(key string) string {
		if key == config.EnvDatabase {
			return "sqlite:" + path
		}
		return ""
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg.PollInterval = config.Duration(20 * time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	h, err := app.New(ctx, cfg, app.Options{Listener: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- h.Run(run) }()

	state := func(id string) string {
		v, err := h.Store().NotificationGet(ctx, "clinic-7", id)
		if err != nil {
			return err.Error()
		}
		return lookup.View(v).Deliveries[0].State
	}
	for deadline := time.Now().Add(30 * time.Second); state(first[0].ID) != "PROVIDER_ACCEPTED" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("confirmation:", state(first[0].ID), "calls:", h.Sim("clinic-hooks").Total())
	fmt.Println("reminder the day before:", state(first[1].ID))
	fmt.Println("reminder the same morning:", state(first[2].ID))
	stop()
	select {
	case err := <-stopped:
		if err != nil {
			log.Fatal(err)
		}
	case <-time.After(2 * cfg.ShutdownTimeout.D()):
		log.Fatalf("herald did not stop within %s", 2*cfg.ShutdownTimeout.D())
	}

	// Output:
	// first run created: true true true
	// second run created: false false false same ids: true
	// declined booking-43 (the slot was taken meanwhile): bookings 0, notifications 0
	// confirmation: PROVIDER_ACCEPTED calls: 1
	// reminder the day before: SCHEDULED
	// reminder the same morning: SCHEDULED
}

// Package herald is herald as a Go library: an application enqueues
// notifications inside its own database transaction, so that its business
// row and the intent to notify commit together or not at all.
//
// Confirming a booking and sending its confirmation are different facts
// with different owners. The booking transaction records the booking and,
// in the same commit, the minimal intent: who, which kind, which params,
// when, under a deterministic dedup key. It never calls a provider. herald
// (the server, `herald serve`, on the same database) later reads the
// recipient's profile and consent, renders, sends and records the outcome.
// A rollback leaves neither the booking nor the notification; a crash after
// the commit leaves both, and herald sends it; running the same booking
// step again adds nothing, because the dedup key already exists.
//
//	c, err := herald.NewClient(herald.Options{KindsFile: "kinds.yaml"}) // herald's kinds_file
//	…
//	tx, err := pool.Begin(ctx)
//	…
//	_, err = tx.Exec(ctx, `UPDATE bookings SET status = 'CONFIRMED' WHERE id = $1`, b.ID)
//	_, err = c.EnqueueTx(ctx, tx, herald.Intent{
//		Tenant: "clinic-7", Recipient: b.PatientID, EventID: b.ID, Kind: "booking.confirmed",
//		Params: map[string]any{"at": b.At.Format("Jan 2 15:04")}, DedupKey: b.ID + ":confirmed",
//	})
//	_, err = c.EnqueueTx(ctx, tx, herald.Intent{
//		Tenant: "clinic-7", Recipient: b.PatientID, EventID: b.ID, Kind: "booking.reminder",
//		Params: map[string]any{"at": b.At.Format("15:04")}, DedupKey: b.ID + ":reminder-d1",
//		SendAt: b.At.AddDate(0, 0, -1), ExpiresAt: b.At,
//	})
//	err = tx.Commit(ctx)
//
// # What is checked, and when
//
// An intent is checked before anything is written, exactly as herald's
// intake checks a request: required fields, a known kind, every template
// param present (a missing one is an *InvalidIntentError naming
// "params.<name>", where intake answers 422), ExpiresAt in the future and
// after SendAt. NewClient checks the kinds themselves. Use the kinds the
// herald server is configured with: keep them in a kinds file that herald's
// config names (kinds_file) and give the client the same file
// (Options.KindsFile); the application then needs neither herald's config
// nor its API keys. A kind the server does not know is parked when it comes
// to be sent.
//
// # Deduplication
//
// DedupKey is unique per tenant. Make it from the business event and the
// notification's role in it ("booking-42:confirmed", "booking-42:reminder-d1"),
// never from the time or a random value. An intent whose key exists writes
// nothing and returns the existing notification's id with Created false.
// Two transactions enqueueing the same key at once: the second waits for the
// first; if the first commits, the second gets its id; if it rolls back, the
// second creates it. (Under REPEATABLE READ or SERIALIZABLE the second gets
// a serialization failure instead; retry the transaction as usual.) The
// same key is how a recovery job re-enqueues reminders it finds missing:
// whatever exists already is left alone.
//
// # Waking herald
//
// On PostgreSQL the enqueue sends a NOTIFY on the lane's wake-up channel in
// the caller's transaction; PostgreSQL delivers it only if the transaction
// commits, so every herald process on the database picks the notification
// up at once after the commit and never for a rolled-back one. A reminder
// whose SendAt is ahead wakes nobody: herald finds it when it is due. On
// SQLite there is no cross-process signal and herald finds rows at its next
// poll (poll_interval).
//
// # Where
//
// The transaction must run on herald's database, with herald's schema
// first on its search_path (as the herald server's own connections have
// it), after herald has migrated it (`herald migrate` or `herald serve`).
// The statements are the store drivers' own: store/postgres.CreateTx and
// store/sqlite.CreateTx. EnqueueTx takes a pgx.Tx, EnqueueSQLTx a
// database/sql transaction on PostgreSQL (github.com/jackc/pgx/v5/stdlib),
// EnqueueSQLiteTx one on herald's SQLite file (opened with sqlite.DSN), and
// Enqueue, for a notification that goes with no other write, takes a pool
// or a connection and writes with one autocommitted statement (no BEGIN or
// COMMIT), or takes a pgx.Tx and writes in it, as EnqueueTx does.
//
// A notification enqueued this way carries no HTTP idempotency key; it is
// read back like any other with GET /v1/notifications/{id} under its
// tenant's API key.
package herald

// Package consumer makes an application's reaction to an event take effect
// once, however many times the event is delivered. Brokers deliver at least
// once: a consumer that commits its effect and dies before it acks gets the
// same message again, and two consumers can hold copies of it at the same
// time. This package separates "how often did it arrive" from "how often did
// it take effect".
//
// # How
//
// The caller's transaction gets one extra row, (consumer, event id, payload
// hash), in herald_consumed_events, whose primary key is (consumer, event_id).
// The row is inserted with INSERT … ON CONFLICT DO NOTHING before the effect
// runs, in the same transaction as the effect, so the unique constraint — not
// a read before the write — decides who applies the event:
//
//   - Inserted: this delivery owns the event; the effect runs and the result
//     is Applied. Commit, then ack. Effect and record commit together or not
//     at all, so a crash before the commit leaves neither and the redelivery
//     applies the event; a crash after the commit leaves both and the
//     redelivery is a duplicate.
//   - Conflict with a committed row carrying the same payload hash: the event
//     was processed; the result is Duplicate and nothing else happens. Ack it.
//   - Conflict with a committed row carrying another hash: the same event id
//     came with a different payload. That is never accepted silently: the new
//     payload is quarantined (see below) and a *MismatchError is returned.
//
// A transaction that holds the same (consumer, event id) and has not ended
// makes the insert wait. If it commits, the waiter finds a duplicate; if it
// rolls back, the waiter's insert goes through and it applies the event. A
// wait that ends in an error — lock_timeout, statement_timeout, a cancelled
// context, a serialization failure under REPEATABLE READ or SERIALIZABLE — is
// returned as that error and never as Duplicate: only a committed row counts
// as "already processed". Roll back, do not ack, and let the event come again.
//
// The record and the effect run inside a savepoint of the caller's
// transaction. When the effect (or anything else here) fails, the savepoint
// is rolled back, so neither the record nor the effect's partial writes stay
// behind, even if the caller goes on to commit: the event is simply not
// processed, and a later delivery processes it. The effect must not end the
// transaction itself. The cost is one savepoint (a subtransaction) per
// event. A transaction that handles more than 64 events this way overflows
// PostgreSQL's per-session subtransaction cache, which slows snapshots for
// every session; prefer one transaction per event, or small batches.
//
// # Events without an ID
//
// The event id is what makes copies of one event recognisable, so it must
// be the same on every copy: the producer's own event id, or one derived the
// same way for every copy from the producer's key for the fact
// ("order-1042:paid"). Not the broker's delivery tag, the arrival time or a
// UUID made on arrival, which differ per copy; not a hash of the payload,
// which makes two equal events (two identical purchases) one and a
// corrected copy a second event. Derive it always or never: a consumer that
// falls back to a derived id only when the producer's is missing counts a
// copy with and a copy without the producer's id as two events. An event
// with no ID, or one no database can record (not UTF-8, a control
// character, only spaces, over MaxEventIDBytes), is refused before
// anything is written with an error that is ErrNoEventID: it can never be processed, so reject it without requeueing
// (to a dead-letter queue) instead of letting it come back for ever.
//
// # The payload hash
//
// PayloadHash is the SHA-256 of the payload's canonical JSON (package
// canonical: keys sorted, white space dropped, numbers as written) when the
// payload is JSON, so a producer that re-encodes the same event does not
// trip the mismatch check; otherwise, or when canonical decoding would lose
// information (invalid UTF-8, lone surrogate escapes), it is the SHA-256 of
// the raw bytes. "1" and "1.0" are different payloads.
//
// # Quarantine
//
// A mismatch inserts (or, for a repeated mismatch, counts) a row in
// herald_quarantined_events holding the consumer, the event id, the stored
// and the new payload hash and the new payload, for a person to review.
// HandlePgx and HandleSQL write it in the caller's transaction, which then
// holds the quarantine row and nothing of this event's effect (the effect did
// not run). Commit that transaction to keep the row, and ack the message: it
// has been dealt with, and delivering it again gives the same answer. If the
// caller rolls back instead, the row is gone, but the stored record is not,
// so the next delivery of that payload is quarantined again; only rolling
// back and dropping the message loses it. Process and ProcessSQL own their
// transaction and commit the quarantine row before they return the
// *MismatchError, so it survives although the caller gets an error.
//
// Why not write the quarantine row outside the caller's transaction, where
// a rollback cannot take it away? HandlePgx and HandleSQL get a transaction,
// not a pool; opening a second connection from inside the first one's
// transaction can exhaust a pool whose every connection is doing the same,
// and it would split what this package writes into two commits. Keeping it
// in the transaction keeps one rule: what this package writes commits or
// rolls back with the caller's work, and the stored record makes the
// mismatch detectable again on every delivery until someone commits the
// quarantine.
//
// # Scope
//
// "Once" means once per (consumer, event id) in this database. Different
// consumers of one event (a points service and an analytics service) are
// independent: each has its own record. Calls outside the database — an
// HTTP API, an e-mail, a payment provider — are not covered: a crash after
// such a call and before the commit repeats it. Give those calls their own
// idempotency key (the event id, for example) and reconcile with the
// provider. A producer bug that emits the same business fact under two event
// ids is also not caught here; where the fact itself must be unique (one
// bonus per account and season), put a unique constraint on the fact.
//
// # Retention
//
// A record protects against duplicates only while it exists. Keep records
// longer than the longest window in which the same event can arrive again:
// the broker's redelivery and retention period, and any manual replay an
// operator might run from an old log or backup. Prune deletes records older
// than a given age; an event delivered again after its record was pruned is
// applied again. Quarantine rows are not pruned: a person reviews and
// removes them.
//
// # Ordering
//
// The package does not order events. Two different events are both applied,
// in whatever order their transactions commit, so effects must be safe in
// any order: increments like balance = balance + amount rather than a value
// read earlier and written back. Where order matters (a grant and its
// reversal), the effect needs its own check, such as a version column.
//
// # Use
//
//	if err := consumer.Migrate(ctx, pool); err != nil { // at start-up
//		return err
//	}
//	…
//	// msg is an amqp.Delivery (github.com/rabbitmq/amqp091-go)
//	_, err := consumer.Process(ctx, pool, consumer.Event{
//		Consumer: "points", ID: msg.MessageId, Payload: msg.Body,
//	}, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, acct, amount)
//		return err
//	})
//	var mismatch *consumer.MismatchError
//	switch {
//	case err == nil: // Applied or Duplicate: committed
//		return msg.Ack(false)
//	case errors.As(err, &mismatch): // quarantined and committed, never applied
//		return msg.Ack(false)
//	case errors.Is(err, consumer.ErrNoEventID): // can never be processed
//		return msg.Reject(false) // to a dead-letter queue, not back to the queue
//	default: // nothing committed, or not known: let it come again
//		return msg.Nack(false, true)
//	}
//
// examples/consumer is the whole service. With Process on a pool, as here,
// the commit is Process's own; given a pgx.Tx (see Beginner) it is the
// caller's. Ack only after the commit returned. If the commit's outcome is unknown (the
// connection broke during COMMIT), do not ack: the redelivery finds either
// the record (Duplicate) or nothing (Applied).
package consumer

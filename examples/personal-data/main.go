// Command personal-data is the Go API client of docs/personal-data.md: it
// enqueues a notification whose params (a person's name) are stored sealed
// under the key in HERALD_PD_K1, the same key herald serve is configured
// with (personal_data.keys).
//
// Run it from this directory:
//
//	export HERALD_PD_K1="$(openssl rand -base64 32)"
//	go run . ./herald.db
//
// It migrates the SQLite database at the path it is given (herald's
// embedded default) and enqueues one notification in a transaction.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store/sqlite"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: personal-data DATABASE_FILE")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "personal-data:", err)
		os.Exit(1)
	}
}

// run enqueues one booking confirmation for patient-1 into the database at
// path, its params sealed.
func run(ctx context.Context, path string, out io.Writer) error {
	if os.Getenv("HERALD_PD_K1") == "" {
		return errors.New("set HERALD_PD_K1 to the secret herald's personal_data.keys name (at least 32 bytes)")
	}
	// README:begin pd-client
	ring, err := seal.New([]seal.Key{{ID: "k1", Secret: []byte(os.Getenv("HERALD_PD_K1"))}})
	if err != nil {
		return err
	}
	client, err := herald.NewClient(herald.Options{KindsFile: "kinds.yaml", PersonalData: ring})
	if err != nil {
		return err
	}
	// README:end

	if _, err := sqlite.Migrate(ctx, path); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	e, err := client.EnqueueSQLiteTx(ctx, tx, herald.Intent{
		Tenant: "clinic-7", Recipient: "patient-1", EventID: "booking-42", Kind: "booking.confirmed", DedupKey: "booking-42:confirmed",
		Params: map[string]any{"at": "May 1 10:30", "name": "Kim Minji"},
	})
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %s\n", e.ID)
	return nil
}

package herald_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestNewClientKindsFile: the client reads the kinds herald's config names
// with kinds_file, and refuses what herald would refuse, naming the file
// and the key; Kinds and KindsFile are one or the other.
func TestNewClientKindsFile(t *testing.T) {
	t.Parallel()
	t.Run("SameKindsAsTheServer", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load(clinicConfigFile, func(key string) string {
			if key == config.EnvDatabase {
				return "sqlite:" + filepath.Join(t.TempDir(), "unused.db")
			}
			return ""
		})
		if err != nil {
			t.Fatalf("the example's herald.yaml: %v", err)
		}
		fromFile, err := herald.NewClient(herald.Options{KindsFile: clinicKindsFile})
		if err != nil {
			t.Fatal(err)
		}
		inCode, err := herald.NewClient(herald.Options{Kinds: cfg.Kinds})
		if err != nil {
			t.Fatal(err)
		}
		// The same intents are accepted and refused alike: each client
		// knows the server's kinds and their params.
		path := filepath.Join(t.TempDir(), "clinic.db")
		if _, err := sqlite.Migrate(t.Context(), path); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", sqlite.DSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, tc := range []struct {
			in    herald.Intent
			param string // of the *InvalidIntentError; "" for none
		}{
			{herald.Intent{Kind: "booking.confirmed", DedupKey: "b:c", Params: map[string]any{"at": "Jan 2"}}, ""},
			{herald.Intent{Kind: "booking.reminder", DedupKey: "b:r"}, "params.at"},
			{herald.Intent{Kind: "booking.cancelled", DedupKey: "b:x", Params: map[string]any{"at": "Jan 2"}}, "kind"},
		} {
			in := tc.in
			in.Tenant, in.Recipient, in.EventID = "clinic-7", "patient-1", "booking-1"
			for name, c := range map[string]*herald.Client{"KindsFile": fromFile, "the server's kinds": inCode} {
				_, err := c.EnqueueSQLiteTx(t.Context(), tx, in)
				var invalid *herald.InvalidIntentError
				switch {
				case tc.param == "" && err != nil:
					t.Errorf("%s: %s: %v", name, in.Kind, err)
				case tc.param != "" && (!errors.As(err, &invalid) || invalid.Param != tc.param):
					t.Errorf("%s: %s: %v, want an invalid %s", name, in.Kind, err, tc.param)
				}
			}
		}
	})

	for _, tc := range []struct {
		name  string
		kinds string // written to kinds.yaml; "" leaves no file
		opts  func(path string) herald.Options
		want  string // "PATH" stands for the kinds file's path
	}{
		{"BadCategory", "kinds:\n  - {name: a, category: urgent, channels: [sms], templates: {sms: {body: hi}}}\n",
			nil, `herald: config: PATH: kinds[0].category: "urgent" is not one of`},
		{"TemplateThatDoesNotParse", "kinds:\n  - name: a\n    category: alert\n    channels: [sms]\n    templates:\n      sms: {body: \"{{.x\"}\n",
			nil, "herald: config: PATH: kinds[0].templates.sms.body: not a Go template"},
		{"UnknownKey", "kinds:\n  - name: a\n    category: alert\n    api_key: k\n", nil, `herald: config: PATH: line 4: unknown key "kinds[0].api_key"`},
		{"NoFile", "", nil, "herald: config: read kinds file: open PATH"},
		{"BothGiven", "kinds:\n  - {name: a, category: alert, channels: [sms], templates: {sms: {body: hi}}}\n",
			func(path string) herald.Options {
				return herald.Options{KindsFile: path, Kinds: []config.Kind{{Name: "b"}}}
			}, "herald: Options: KindsFile and Kinds are both set"},
		{"NeitherGiven", "", func(string) herald.Options { return herald.Options{} }, "herald: Options: KindsFile or Kinds is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "kinds.yaml")
			if tc.kinds != "" {
				if err := os.WriteFile(path, []byte(tc.kinds), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			opts := herald.Options{KindsFile: path}
			if tc.opts != nil {
				opts = tc.opts(path)
			}
			_, err := herald.NewClient(opts)
			want := strings.ReplaceAll(tc.want, "PATH", path)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("NewClient = %v, want %q…", err, want)
			}
		})
	}
}

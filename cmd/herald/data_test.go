package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
)

// rekeyCLI runs herald data rekey with config (written to a file) and
// returns its exit status and output.
func rekeyCLI(t *testing.T, config string, args ...string) (int, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return cli(append([]string{"data", "rekey", "--config", path}, args...)...)
}

// A profile stored before keys were configured is sealed by herald data
// rekey; a rotation seals it again with the new key (the old still opens
// it); a run that finds nothing left says so; a config that lacks the key
// a value was sealed with exits 1 naming that key.
func TestDataRekey(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, driver, nil)
			const phone = "+821055556666"
			if err := db.Store.ProfilePut(context.Background(), store.Profile{Tenant: "acme", Recipient: "u1",
				Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: phone}}); err != nil {
				t.Fatal(err)
			}
			base := "database: '" + db.Database + "'\n"
			k1 := base + "personal_data: {keys: [{id: k1, secret: 'first-personal-data-key-0123456789abcdef'}]}\n"
			k2 := base + "personal_data: {keys: [{id: k2, secret: 'second-personal-data-key-0123456789abcde'}, {id: k1, secret: 'first-personal-data-key-0123456789abcdef'}]}\n"
			stored := func() string {
				t.Helper()
				p, err := db.Store.ProfileGet(context.Background(), "acme", "u1")
				if err != nil {
					t.Fatal(err)
				}
				return p.Addresses[heraldtype.ChannelSMS]
			}

			if code, _, errOut := rekeyCLI(t, base); code != 1 || !strings.Contains(errOut, "personal_data.keys is empty") {
				t.Fatalf("without keys: exit %d, %q", code, errOut)
			}
			code, out, errOut := rekeyCLI(t, k1, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, errOut)
			}
			var rep rekeyReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Key != "k1" || rep.Fields[0].Field != store.SealedProfiles || rep.Fields[0].Sealed != 1 {
				t.Fatalf("--json printed %s (%v), want k1 and the profile sealed", out, err)
			}
			if v := stored(); seal.KeyID(v) != "k1" || strings.Contains(v, "5555") {
				t.Fatalf("the stored address is %q, want it sealed with k1", v)
			}

			code, out, errOut = rekeyCLI(t, k2)
			if code != 0 || !strings.Contains(out, "sealing with key k2") || !strings.Contains(out, "keys after it may be removed") {
				t.Fatalf("rotation: exit %d: %s%s", code, out, errOut)
			}
			if v := stored(); seal.KeyID(v) != "k2" {
				t.Fatalf("after the rotation the stored address is %q, want it sealed with k2", v)
			}
			if _, out, _ := rekeyCLI(t, k2, "--json"); !strings.Contains(out, `"sealed": 0`) || strings.Contains(out, `"sealed": 1`) {
				t.Errorf("a second run: %s", out)
			}
			// A config that dropped k2 too early.
			code, out, errOut = rekeyCLI(t, base+"personal_data: {keys: [{id: k3, secret: 'third-personal-data-key-0123456789abcdef'}]}\n")
			if code != 1 || !strings.Contains(out, `sealed with key "k2", which the config does not list`) ||
				!strings.Contains(errOut, "some values do not open") {
				t.Fatalf("without k2: exit %d: %s%s", code, out, errOut)
			}
			if v := stored(); seal.KeyID(v) != "k2" {
				t.Fatalf("a failed run changed the stored address to %q", v)
			}
		})
	}
}

func TestDataRekeyUsage(t *testing.T) {
	t.Parallel()
	if code, _, errOut := rekeyCLI(t, "database: 'sqlite::memory:'\n", "--page", "0"); code != 2 || !strings.Contains(errOut, "--page must be 1..10000") {
		t.Errorf("--page 0: exit %d, %q", code, errOut)
	}
}

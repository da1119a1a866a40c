package main

import (
	"os"
	"strings"
	"testing"
)

// The commands that call no provider read none of their credentials: an
// operator's shell with the production config and only the database's
// secrets runs them. serve still reads every one and stops without it.
func TestOperatorCommandsNeedNoProviderCredentials(t *testing.T) {
	t.Parallel()
	db := openRecountDB(t, "sqlite")
	raw, err := os.ReadFile(db.config)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw) + `environment: production
providers:
  - {name: tw, type: twilio, channel: sms, account_sid: AC1, auth_token: {env: HERALD_TEST_UNSET_TWILIO_TOKEN}, from: "+15005550006"}
`
	if err := os.WriteFile(db.config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"migrate"}, {"reconcile"}, {"parked", "list"}, {"audit", "list"}, {"keys", "list"},
	} {
		code, out, errb := cli(append(args, "--config", db.config)...)
		if code != 0 || strings.Contains(errb, "HERALD_TEST_UNSET_TWILIO_TOKEN") {
			t.Errorf("herald %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errb)
		}
	}
	if code, _, errb := cli("serve", "--config", db.config); code != 2 || !strings.Contains(errb, "HERALD_TEST_UNSET_TWILIO_TOKEN is not set") {
		t.Errorf("herald serve without the credential: exit %d, %s; want 2 naming it", code, errb)
	}
}

package app

import (
	"testing"

	"github.com/heraldhq/herald/config"
)

// Readiness hides the URLs' passwords in an error it quotes; a password
// that is its user's name (guest/guest) is hidden only where it stands as
// the password, so the name the broker's refusal quotes stays readable.
func TestRedactHidesPasswordsNotNames(t *testing.T) {
	t.Parallel()
	a := &App{cfg: &config.Config{Database: "postgres://herald:s3cret-pw@db/herald", RabbitMQURL: "amqp://guest:guest@mq:5672/"}}
	got := a.redact(`dial amqp://guest:guest@mq:5672/: Exception (403) "username or password not allowed: refused for user 'guest'"; ` +
		`postgres: password s3cret-pw rejected`)
	want := `dial amqp://guest:xxxxx@mq:5672/: Exception (403) "username or password not allowed: refused for user 'guest'"; ` +
		`postgres: password xxxxx rejected`
	if got != want {
		t.Fatalf("redact:\n got %s\nwant %s", got, want)
	}
	// Only the userinfo's password is spared where it is the name: an
	// sslpassword equal to the user's name is hidden as any secret.
	b := &App{cfg: &config.Config{Database: "postgres://herald@db/x?sslpassword=herald"}}
	if got := b.redact("connect: sslpassword=herald refused"); got != "connect: sslpassword=xxxxx refused" {
		t.Fatalf("redact of an sslpassword that is the user's name: %s", got)
	}
}

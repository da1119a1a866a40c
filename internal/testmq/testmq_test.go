package testmq

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestUnreachableBrokerSkipsOrFails runs TestHelperRequire in a child
// process pointed at a closed port: without CI it skips, with CI=true it fails.
func TestUnreachableBrokerSkipsOrFails(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, ci string
		wantOK   bool
		want     string
	}{
		{"SkipsLocally", "", true, "--- SKIP: TestHelperRequire"},
		{"FailsInCI", "true", false, "--- FAIL: TestHelperRequire"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRequire$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTMQ_HELPER=1", "CI="+c.ci, EnvURL+"=amqp://guest:secret@127.0.0.1:1/")
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.wantOK || !strings.Contains(string(out), c.want) {
				t.Fatalf("err %v, output:\n%s", err, out)
			}
			if !strings.Contains(string(out), "RabbitMQ unreachable at amqp://guest:xxxxx@127.0.0.1:1/") {
				t.Errorf("the reason does not name the broker (password hidden):\n%s", out)
			}
		})
	}
}

func TestHelperRequire(t *testing.T) {
	if os.Getenv("TESTMQ_HELPER") != "1" {
		t.Skip("run by TestUnreachableBrokerSkipsOrFails")
	}
	Require(t)
	t.Log("reached the broker")
}

func TestVHostIsFreshAndDeleted(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("Use", func(t *testing.T) {
		u := VHost(t)
		name = VHostOf(u)
		conn, err := amqp.Dial(u)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	if out := Ctl(t, "list_vhosts", "name"); strings.Contains(out, name) {
		t.Fatalf("vhost %q still exists after its test:\n%s", name, out)
	}
}

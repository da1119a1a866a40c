package testmq

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestUnreachableBrokerSkipsOrFails runs TestHelperRequire and
// TestVHostIsFreshAndDeleted in a child process pointed at a closed port:
// without CI each skips with one line, with CI=true each fails.
func TestUnreachableBrokerSkipsOrFails(t *testing.T) {
	t.Parallel()
	tests := []string{"TestHelperRequire", "TestVHostIsFreshAndDeleted"}
	for _, c := range []struct {
		name, ci string
		wantOK   bool
		want     string
	}{
		{"SkipsLocally", "", true, "--- SKIP: "},
		{"FailsInCI", "true", false, "--- FAIL: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^("+strings.Join(tests, "|")+")$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTMQ_HELPER=1", "CI="+c.ci, EnvURL+"=amqp://guest:secret@127.0.0.1:1/")
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.wantOK {
				t.Fatalf("err %v, output:\n%s", err, out)
			}
			for _, name := range tests {
				if !strings.Contains(string(out), c.want+name+" ") {
					t.Errorf("no %q in the output:\n%s", c.want+name, out)
				}
			}
			if n := strings.Count(string(out), "RabbitMQ unreachable at amqp://guest:xxxxx@127.0.0.1:1/"); n != len(tests) {
				t.Errorf("%d reasons naming the broker (password hidden), want %d:\n%s", n, len(tests), out)
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
	Require(t) // the check below runs rabbitmqctl: skip here (fail under CI) when the broker is away
	var name string
	t.Run("Use", func(t *testing.T) {
		u := VHost(t)
		name = VHostOf(u)
		if _, err := Channel(t, u).QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	if name == "" {
		t.Fatal("the subtest created no vhost")
	}
	if out := Ctl(t, "list_vhosts", "name"); slices.Contains(strings.Fields(out), name) {
		t.Fatalf("vhost %q still exists after its test:\n%s", name, out)
	}
}

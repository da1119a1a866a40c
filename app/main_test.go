package app_test

import (
	"os"
	"testing"

	"github.com/heraldhq/herald/internal/testmq"
)

// TestMain puts each test's vhost deletion off to the next test's
// creation (testmq.Main): one rabbitmqctl call a test, not three.
func TestMain(m *testing.M) { os.Exit(testmq.Main(m)) }

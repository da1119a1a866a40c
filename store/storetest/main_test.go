package storetest_test

import (
	"os"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
)

// TestMain removes the tests built without -race for the erring-store
// meta-test (testenv.WithoutRace).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

package bench

import (
	"testing"

	"github.com/heraldhq/herald/bench/peakrss"
)

// TestMain reports the process's own peak resident set to benchrun.
func TestMain(m *testing.M) { peakrss.Main(m) }

//go:build race

package e2e

// raceEnabled: this test binary was built with -race, so herald is too.
const raceEnabled = true

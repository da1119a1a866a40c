//go:build !race

package e2e

// raceEnabled: this test binary was built without -race, so herald is too.
const raceEnabled = false

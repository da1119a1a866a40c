//go:build !race

package storetest_test

// raceEnabled: this test binary was built with -race.
const raceEnabled = false

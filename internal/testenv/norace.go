//go:build !race

package testenv

// RaceEnabled reports whether this binary was built with -race.
const RaceEnabled = false

package config

// RateLimit is a provider's call budget, shared by every herald process on
// one database: a token bucket refilled at PerSecond up to Burst.
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

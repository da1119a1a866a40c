package config

// QuietHours is when marketing may be sent.
type QuietHours struct{}

func (c *Config) quietHoursDefaults()       {}
func (c *Config) validateQuietHours() error { return nil }

package config

// EventSuppression is the at-most-one-send-per-event rule.
type EventSuppression struct{}

func (c *Config) eventSuppressionDefaults()       {}
func (c *Config) validateEventSuppression() error { return nil }

package config

func (c *Config) validateChannelPolicy() error { return nil }

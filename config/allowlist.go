package config

import (
	"fmt"

	"github.com/heraldhq/herald/allowlist"
	"github.com/heraldhq/herald/heraldtype"
)

// The values of Config.Environment.
const (
	EnvProduction  = "production"
	EnvStaging     = "staging"
	EnvDevelopment = "development"
)

// AllowList is the addresses a herald outside production may send to
// (package allowlist says how each is matched). Outside production a send
// whose destination is not on it ends SUPPRESSED(NOT_ALLOWLISTED) without
// a provider call; in production it is not read.
type AllowList struct {
	// Phones are exact phone numbers for sms and alimtalk, E.164
	// (+821012345678) or Korean national (010-1234-5678); both sides are
	// normalised before they are compared. Defaults to none.
	Phones []string `yaml:"phones"`
	// Emails are exact e-mail addresses (case-insensitive). Defaults to
	// none.
	Emails []string `yaml:"emails"`
	// EmailDomains allow every address of a domain (example.com: not its
	// subdomains). Defaults to none.
	EmailDomains []string `yaml:"email_domains"`
	// DeviceTokens are exact push device tokens. Defaults to none.
	DeviceTokens []string `yaml:"device_tokens"`

	// Off switches layers of the guard off: a seam for the tests that
	// show each layer blocks on its own. Not a key of the file, so a
	// herald started from one always has all three. Defaults to none.
	Off AllowListLayers `yaml:"-"`
}

// AllowListLayers names the guard's three layers.
type AllowListLayers struct {
	// Dispatcher is the db claimer's gate, before the sender sees a job.
	Dispatcher bool
	// Sender is the sender's pre-check, on the rendered message.
	Sender bool
	// Adapter is the wrapper around each adapter, right before the call.
	Adapter bool
}

// List compiles the allow-list (Validate has checked it).
func (a AllowList) List() (*allowlist.List, error) {
	return allowlist.New(allowlist.Config{Phones: a.Phones, Emails: a.Emails, EmailDomains: a.EmailDomains, DeviceTokens: a.DeviceTokens})
}

// Guarded reports whether sends through p are checked against the
// allow-list: outside production, every provider but the simulator
// (type sim reaches nobody, so the development config's first commands
// work with an empty list).
func (c *Config) Guarded(p Provider) bool {
	return c.Environment != EnvProduction && p.Type != "sim"
}

// allowListDefaults: the built-in config is development. A file (or a
// Config built in code) without environment is development too, unless it
// names a provider the guard would act on: then validateAllowList asks
// for environment to be said, so a forgotten key neither sends to real
// people nor suppresses a production deployment's sends for good.
func (c *Config) allowListDefaults() {
	if c.Environment == "" && (c.Dev || c.reachesPeople() == nil) {
		c.Environment = EnvDevelopment
	}
}

// reachesPeople returns the first provider that sends to a recipient's
// own address (a phone, an e-mail, a device) through something other than
// the simulator, or nil.
func (c *Config) reachesPeople() *Provider {
	for i, p := range c.Providers {
		if p.Type != "sim" && heraldtype.Channel(p.Channel).NeedsAddress() {
			return &c.Providers[i]
		}
	}
	return nil
}

func (c *Config) validateAllowList() error {
	switch c.Environment {
	case EnvProduction, EnvStaging, EnvDevelopment:
	case "":
		p := c.reachesPeople()
		if p == nil {
			break // development, once WithDefaults has run
		}
		return fmt.Errorf("config: environment: required when a provider can reach people (provider %q, type %s on %s): "+
			"say production, or staging or development to send only to the allowlist", p.Name, p.Type, p.Channel)
	default:
		return fmt.Errorf("config: environment: %q is not production, staging or development", c.Environment)
	}
	if _, err := c.AllowList.List(); err != nil {
		return fmt.Errorf("config: allowlist.%w", err)
	}
	return nil
}

package config

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Inbox configures the recipient inbox: how long items are kept, how the
// leader purges older ones, and the live streams of /v1/me/stream.
type Inbox struct {
	// Retention is how long an inbox item is kept after it was created.
	// Defaults to 8760h (365 days).
	Retention Duration `yaml:"retention"`
	// TenantRetention overrides Retention per tenant. Defaults to none.
	TenantRetention map[string]Duration `yaml:"tenant_retention"`
	// PurgeInterval is how often the leader purges items past their
	// retention. Defaults to 1 hour.
	PurgeInterval Duration `yaml:"purge_interval"`
	// PurgeBatch is how many items one purge transaction deletes.
	// Defaults to 1,000.
	PurgeBatch int `yaml:"purge_batch"`
	// StreamsMax caps the open /v1/me/stream connections of one herald
	// process; one more is refused with 503. It must stay below
	// server.max_connections, which counts streams too: at that cap the
	// listener accepts nothing else, health checks included. Defaults to
	// half of server.max_connections, at most 10,000.
	StreamsMax int `yaml:"streams_max"`
	// StreamsPerRecipient caps the streams one recipient (one tenant's
	// recipient id) has open on one process; one more is refused with
	// 429. A recipient token is in an end user's hands: without this cap
	// one token could hold every stream slot. Defaults to 8 (a phone, a
	// tablet and a few browser tabs), or streams_max if lower.
	StreamsPerRecipient int `yaml:"streams_per_recipient"`
	// StreamsPerTenant caps the streams one tenant's recipients have open
	// on one process together; one more is refused with 429. A tenant
	// with a send key can mint a token for any number of recipients, so
	// where several tenants share a herald this keeps one from holding
	// every slot of streams_max. Defaults to streams_max: no cap of its own.
	StreamsPerTenant int `yaml:"streams_per_tenant"`
	// StreamHeartbeat is how often an idle stream sends a comment line so
	// proxies keep it open. Defaults to 25 seconds.
	StreamHeartbeat Duration `yaml:"stream_heartbeat"`
	// StreamResync is how often a stream reads its inbox again on its own,
	// whether or not a change was signalled: what a lost signal can cost.
	// Defaults to 30 seconds.
	StreamResync Duration `yaml:"stream_resync"`

	streamsMaxSet bool // StreamsMax was given, not defaulted
}

// RetentionFor returns tenant's retention.
func (i Inbox) RetentionFor(tenant string) time.Duration {
	if d, ok := i.TenantRetention[tenant]; ok {
		return d.D()
	}
	return i.Retention.D()
}

// RecipientTokens configures the tokens an app reads one recipient's inbox
// with (package auth).
type RecipientTokens struct {
	// TTL is a token's lifetime when the mint asks for none. Defaults to 1 hour.
	TTL Duration `yaml:"ttl"`
	// MaxTTL is the longest lifetime a mint may ask for; at most 24 hours.
	// Defaults to 24 hours.
	MaxTTL Duration `yaml:"max_ttl"`
	// Keys lists each tenant's signing keys. The first signs new tokens;
	// every one verifies. To rotate, list the new key first and keep the
	// old one after it for max_ttl, then drop it. A tenant with no keys
	// cannot mint tokens. Defaults to none (the development config has one
	// key for its tenant).
	Keys map[string][]RecipientKey `yaml:"keys"`
}

// MaxRecipientTokenTTL bounds recipient_tokens.max_ttl.
const MaxRecipientTokenTTL = 24 * time.Hour

// RecipientKey is one signing key. Its secret comes from exactly one of
// secret_file (a file holding it, relative to the config file's
// directory; surrounding white space is dropped), secret_env (an
// environment variable) or secret (in the file itself: for development).
// A secret is at least 32 bytes.
type RecipientKey struct {
	ID         string `yaml:"id"`
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
	SecretEnv  string `yaml:"secret_env"`
}

// KeySecret is a recipient token key with its secret read.
type KeySecret struct {
	ID     string
	Secret []byte
}

// RecipientTokenKeys returns each tenant's keys with their secrets, as
// Load read them from files and the environment.
func (c *Config) RecipientTokenKeys() map[string][]KeySecret { return c.tokenKeys }

// readSecrets reads every recipient token key's secret (Load calls it,
// after the environment is known). dir is the config file's directory.
// Errors name the key, never the secret.
func (c *Config) readSecrets(dir string, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	c.tokenKeys = map[string][]KeySecret{}
	for tenant, keys := range c.RecipientTokens.Keys {
		for i, k := range keys {
			secret, err := readSecret(fmt.Sprintf("recipient_tokens.keys.%s[%d]", tenant, i), k, dir, getenv)
			if err != nil {
				return err
			}
			c.tokenKeys[tenant] = append(c.tokenKeys[tenant], KeySecret{ID: k.ID, Secret: secret})
		}
	}
	return nil
}

// readSecret reads the secret of k, named key in errors, from exactly one
// of its sources. dir is the config file's directory. Errors name the key
// and the file or variable, never the secret.
func readSecret(key string, k RecipientKey, dir string, getenv func(string) string) ([]byte, error) {
	given := 0
	for _, s := range []string{k.Secret, k.SecretFile, k.SecretEnv} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return nil, fmt.Errorf("config: %s: exactly one of secret, secret_file, secret_env is required", key)
	}
	secret := k.Secret
	switch {
	case k.SecretFile != "":
		raw, err := readBeside(dir, k.SecretFile)
		if err != nil {
			// The path is the operator's own; the error of ReadFile
			// holds no secret.
			return nil, fmt.Errorf("config: %s.secret_file: %w", key, err)
		}
		secret = strings.TrimSpace(string(raw))
	case k.SecretEnv != "":
		secret = getenv(k.SecretEnv)
		if secret == "" {
			return nil, fmt.Errorf("config: %s.secret_env: %s is not set", key, k.SecretEnv)
		}
	}
	return []byte(secret), nil
}

func (c *Config) inboxDefaults() {
	def(&c.Inbox.Retention, 365*24*time.Hour)
	def(&c.Inbox.PurgeInterval, time.Hour)
	def(&c.Inbox.StreamHeartbeat, 25*time.Second)
	def(&c.Inbox.StreamResync, 30*time.Second)
	if c.Inbox.PurgeBatch == 0 {
		c.Inbox.PurgeBatch = 1000
	}
	c.Inbox.streamsMaxSet = c.Inbox.streamsMaxSet || c.Inbox.StreamsMax != 0
	if c.Inbox.StreamsMax == 0 {
		// Filled after server.max_connections (hardeningDefaults).
		c.Inbox.StreamsMax = max(1, min(10000, c.Server.MaxConnections/2))
	}
	if c.Inbox.StreamsPerRecipient == 0 {
		c.Inbox.StreamsPerRecipient = min(8, c.Inbox.StreamsMax)
	}
	if c.Inbox.StreamsPerTenant == 0 {
		c.Inbox.StreamsPerTenant = c.Inbox.StreamsMax
	}
	def(&c.RecipientTokens.TTL, time.Hour)
	def(&c.RecipientTokens.MaxTTL, MaxRecipientTokenTTL)
}

func (c *Config) validateInbox() error {
	if err := positive([]setting{
		{"inbox.retention", c.Inbox.Retention}, {"inbox.purge_interval", c.Inbox.PurgeInterval},
		{"inbox.stream_heartbeat", c.Inbox.StreamHeartbeat}, {"inbox.stream_resync", c.Inbox.StreamResync},
		{"recipient_tokens.ttl", c.RecipientTokens.TTL}, {"recipient_tokens.max_ttl", c.RecipientTokens.MaxTTL},
	}); err != nil {
		return err
	}
	for tenant, d := range c.Inbox.TenantRetention {
		if d <= 0 {
			return fmt.Errorf("config: inbox.tenant_retention.%s: must be positive, got %s", tenant, d.D())
		}
	}
	if c.Inbox.PurgeBatch < 1 || c.Inbox.PurgeBatch > 100000 {
		return fmt.Errorf("config: inbox.purge_batch: must be 1..100000, got %d", c.Inbox.PurgeBatch)
	}
	if c.Inbox.StreamsMax < 1 {
		return fmt.Errorf("config: inbox.streams_max: must be at least 1, got %d", c.Inbox.StreamsMax)
	}
	if c.Inbox.streamsMaxSet && c.Inbox.StreamsMax >= c.Server.MaxConnections {
		return fmt.Errorf("config: inbox.streams_max: %d must be below server.max_connections (%d), which counts streams too: "+
			"at that many the API answers nothing else; raise max_connections or lower streams_max",
			c.Inbox.StreamsMax, c.Server.MaxConnections)
	}
	if c.Inbox.StreamsPerRecipient < 1 || c.Inbox.StreamsPerRecipient > c.Inbox.StreamsMax {
		return fmt.Errorf("config: inbox.streams_per_recipient: must be 1..streams_max (%d), got %d", c.Inbox.StreamsMax, c.Inbox.StreamsPerRecipient)
	}
	if c.Inbox.StreamsPerTenant < c.Inbox.StreamsPerRecipient || c.Inbox.StreamsPerTenant > c.Inbox.StreamsMax {
		return fmt.Errorf("config: inbox.streams_per_tenant: must be streams_per_recipient (%d)..streams_max (%d), got %d",
			c.Inbox.StreamsPerRecipient, c.Inbox.StreamsMax, c.Inbox.StreamsPerTenant)
	}
	rt := c.RecipientTokens
	if rt.MaxTTL.D() > MaxRecipientTokenTTL {
		return fmt.Errorf("config: recipient_tokens.max_ttl: at most %s, got %s", MaxRecipientTokenTTL, rt.MaxTTL.D())
	}
	if rt.TTL > rt.MaxTTL {
		return fmt.Errorf("config: recipient_tokens.ttl: %s is longer than max_ttl %s", rt.TTL.D(), rt.MaxTTL.D())
	}
	if c.tokenKeys == nil {
		// A config built in code rather than by Load: read its secrets now
		// (files relative to the working directory).
		if err := c.readSecrets("", nil); err != nil {
			return err
		}
	}
	for tenant, keys := range c.tokenKeys {
		if len(keys) == 0 {
			return fmt.Errorf("config: recipient_tokens.keys.%s: at least one key", tenant)
		}
		seen := map[string]bool{}
		for i, k := range keys {
			key := fmt.Sprintf("recipient_tokens.keys.%s[%d]", tenant, i)
			switch {
			case k.ID == "" || len(k.ID) > 64:
				return fmt.Errorf("config: %s.id: 1..64 characters required", key)
			case seen[k.ID]:
				return fmt.Errorf("config: %s.id: duplicate id %q", key, k.ID)
			case len(k.Secret) < 32:
				return fmt.Errorf("config: %s: the secret must be at least 32 bytes, got %d", key, len(k.Secret))
			}
			seen[k.ID] = true
		}
	}
	return nil
}

package config

import (
	"fmt"
	"os"

	"github.com/heraldhq/herald/seal"
)

// PersonalData configures the encryption of personal data at rest
// (package seal): profile addresses, device tokens and params are sealed
// with AES-256-GCM under the first key; every key listed opens. To rotate,
// put a new key first, restart, run `herald data rekey`, and drop the old
// key once it reports nothing left under it.
//
//	personal_data:
//	  keys:
//	    - {id: k2, secret_env: HERALD_PD_K2}   # seals
//	    - {id: k1, secret_file: pd-k1.key}     # still opens
//
// Each key is an id (1..16 of a-z, 0-9, '-', '_': stored with every
// value) and a secret of at least 32 bytes from exactly one of secret_file,
// secret_env or secret (in the file: development only), as for
// recipient_tokens keys. Without keys, values are stored as plain text.
type PersonalData struct {
	Keys []RecipientKey `yaml:"keys"`
}

// PersonalDataKeys returns the personal data keys with their secrets, the
// sealing one first; nil when none are configured. A config built in code
// (not by Load) has its secrets read now, files relative to the working
// directory.
func (c *Config) PersonalDataKeys() ([]KeySecret, error) {
	if c.pdKeys == nil && len(c.PersonalData.Keys) > 0 {
		if err := c.readPersonalData("", nil); err != nil {
			return nil, err
		}
	}
	return c.pdKeys, nil
}

// readPersonalData reads the keys' secrets (Load calls it). Errors name
// the key, never the secret.
func (c *Config) readPersonalData(dir string, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	c.pdKeys = nil
	for i, k := range c.PersonalData.Keys {
		secret, err := readSecret(fmt.Sprintf("personal_data.keys[%d]", i), k, dir, getenv)
		if err != nil {
			return err
		}
		c.pdKeys = append(c.pdKeys, KeySecret{ID: k.ID, Secret: secret})
	}
	return nil
}

func (c *Config) validatePersonalData() error {
	keys, err := c.PersonalDataKeys()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, k := range keys {
		key := fmt.Sprintf("personal_data.keys[%d]", i)
		switch {
		case !seal.ValidKeyID(k.ID):
			return fmt.Errorf("config: %s.id: 1 to 16 of a-z, 0-9, '-' and '_' required, got %q", key, k.ID)
		case seen[k.ID]:
			return fmt.Errorf("config: %s.id: duplicate id %q", key, k.ID)
		case len(k.Secret) < seal.MinSecretLen:
			return fmt.Errorf("config: %s: the secret must be at least 32 bytes, got %d", key, len(k.Secret))
		}
		seen[k.ID] = true
	}
	return nil
}

package app

import (
	"fmt"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
)

// RecipientTokens builds the recipient token minter and verifier of cfg's
// recipient_tokens: each tenant's keys with their secrets read (the first
// signs, all verify), ttl and max_ttl. A config that was never defaulted
// gets the defaults, 1 hour and 24 hours.
func RecipientTokens(cfg *config.Config, clk clock.Clock) (*auth.RecipientTokens, error) {
	keys := map[string][]auth.RecipientKey{}
	for tenant, ks := range cfg.RecipientTokenKeys() {
		for _, k := range ks {
			keys[tenant] = append(keys[tenant], auth.RecipientKey{ID: k.ID, Secret: k.Secret})
		}
	}
	ttl, maxTTL := cfg.RecipientTokens.TTL.D(), cfg.RecipientTokens.MaxTTL.D()
	if ttl <= 0 {
		ttl = time.Hour
	}
	if maxTTL <= 0 {
		maxTTL = config.MaxRecipientTokenTTL
	}
	t, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{Keys: keys, TTL: ttl, MaxTTL: maxTTL, Clock: clk})
	if err != nil {
		return nil, fmt.Errorf("recipient_tokens: %w", err)
	}
	return t, nil
}

package app

import (
	"fmt"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
)

// recipientTokens builds the recipient token minter and verifier of cfg's
// recipient_tokens: each tenant's keys with their secrets read (the first
// signs, all verify), ttl and max_ttl (both set: cfg is validated).
func recipientTokens(cfg *config.Config, clk clock.Clock) (*auth.RecipientTokens, error) {
	keys := map[string][]auth.RecipientKey{}
	for tenant, ks := range cfg.RecipientTokenKeys() {
		for _, k := range ks {
			keys[tenant] = append(keys[tenant], auth.RecipientKey{ID: k.ID, Secret: k.Secret})
		}
	}
	t, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{
		Keys: keys, TTL: cfg.RecipientTokens.TTL.D(), MaxTTL: cfg.RecipientTokens.MaxTTL.D(), Clock: clk,
	})
	if err != nil {
		return nil, fmt.Errorf("recipient_tokens: %w", err)
	}
	return t, nil
}

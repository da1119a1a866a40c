package app

import (
	"log/slog"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/ratelimit"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// rateLimiter is the sender's limiter: one bucket per provider with a
// rate_limit, shared through st by every process on the database
// (package ratelimit). With no provider limited it is nil, so the sender
// makes no store call for it.
func rateLimiter(cfg *config.Config, st store.RateBuckets, logger *slog.Logger) sender.Limiter {
	limits := map[string]ratelimit.Limit{}
	for _, p := range cfg.Providers {
		if p.RateLimit != nil {
			limits[p.Name] = ratelimit.Limit{PerSecond: p.RateLimit.PerSecond, Burst: p.RateLimit.Burst}
		}
	}
	if len(limits) == 0 {
		return nil
	}
	return ratelimit.New(ratelimit.Config{Store: st, Limits: limits, Logger: logger})
}

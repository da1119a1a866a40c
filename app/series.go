package app

import (
	"slices"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
)

// knownSeries is what the metrics can export at 0 from the start under cfg:
// each lane's channels (its kinds'), the providers, and the results the
// transport's dispatchers count.
func knownSeries(cfg *config.Config, cat *catalog.Catalog) metrics.Known {
	k := metrics.Known{Channels: map[heraldtype.Lane][]heraldtype.Channel{}}
	for _, kind := range cat.Kinds() {
		for _, ch := range kind.Channels {
			if !slices.Contains(k.Channels[kind.Lane], ch) {
				k.Channels[kind.Lane] = append(k.Channels[kind.Lane], ch)
			}
		}
	}
	for _, p := range cfg.Providers {
		k.Providers = append(k.Providers, p.Name)
	}
	k.DispatchResults = slices.Clone(dispatch.ClaimerResults)
	if cfg.Transport == "rabbitmq" {
		k.DispatchResults = slices.Clone(dispatch.RelayResults)
		for _, r := range rabbitmq.ConsumerResults {
			if !slices.Contains(k.DispatchResults, r) {
				k.DispatchResults = append(k.DispatchResults, r)
			}
		}
	}
	return k
}

package app

import (
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
)

func (a *App) allowListChecks() []sender.Check { return nil }
func (a *App) allowListGates() []gate          { return nil }

// guardProvider is the allow-list's layer in the adapter itself.
func (a *App) guardProvider(p config.Provider, impl provider.Provider) provider.Provider { return impl }

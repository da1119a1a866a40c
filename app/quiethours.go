package app

import "github.com/heraldhq/herald/sender"

func (a *App) quietHoursChecks() []sender.Check { return nil }
func (a *App) quietHoursGates() []gate          { return nil }

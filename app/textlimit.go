package app

import "github.com/heraldhq/herald/sender"

func (a *App) textLimitChecks() []sender.Check { return nil }

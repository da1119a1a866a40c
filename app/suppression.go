package app

import "github.com/heraldhq/herald/sender"

func (a *App) suppressionChecks() []sender.Check { return nil }

package app

import (
	"context"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
)

// policyChecks are the sender's send-policy rules, in the order they run
// (each rule's wiring is a file of its own).
func (a *App) policyChecks() []sender.Check {
	var checks []sender.Check
	for _, rule := range []func() []sender.Check{a.allowListChecks, a.textLimitChecks, a.quietHoursChecks, a.suppressionChecks} {
		checks = append(checks, rule()...)
	}
	return checks
}

// gate is one rule's dispatcher layer: a ruling on a claimed job, before
// the sender sees it.
type gate func(ctx context.Context, job heraldtype.Job) sender.Ruling

// dispatchGate is the db claimers' Gate: the dispatcher's own layer of the
// send policy, its rulings carried out by the sender (Sender.Apply).
func (a *App) dispatchGate() func(ctx context.Context, job heraldtype.Job) (sender.Result, bool) {
	var gates []gate
	for _, rule := range []func() []gate{a.allowListGates, a.quietHoursGates} {
		gates = append(gates, rule()...)
	}
	if len(gates) == 0 {
		return nil
	}
	return func(ctx context.Context, job heraldtype.Job) (sender.Result, bool) {
		for _, g := range gates {
			if r := g(ctx, job); !r.Go() {
				return a.sender.Apply(ctx, job, r), true
			}
		}
		return sender.Result{}, false
	}
}

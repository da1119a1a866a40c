// Package recount recomputes the inbox's unread counters from the items
// (store.Inbox.InboxRecount) for an operator: `herald inbox recount` and
// POST /v1/ops/inbox/recount both run it and show its Report.
//
// The counters are kept exact by every inbox write (store.Inbox), so a
// recount that repairs anything found a counter broken by hand or by a
// bug: each repair is counted in herald_inbox_recount_repaired_total (the
// goal is zero) and listed in the report (at most store.MaxInboxDrifts
// rows; Repaired counts them all). A recount walks the counter rows in
// batches, each its own short transaction that locks only its rows, so it
// can run beside intake and the apps' reads; a counter that changes after
// its batch is left to the writes that keep it.
//
// The report names recipients by the tenant's own ids: fine for the
// operator who asked, never logged (the log line has the counts only).
package recount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Store is the one store call a recount makes.
type Store interface {
	InboxRecount(ctx context.Context, p store.InboxRecountParams) (store.InboxRecountResult, error)
}

// ErrRecipientWithoutTenant: a recipient id means nothing without its
// tenant.
var ErrRecipientWithoutTenant = errors.New("a recipient needs its tenant")

// Params selects the counters: one recipient (Tenant and Recipient), one
// tenant's (Tenant), or every one (neither).
type Params struct {
	Tenant    string `json:"tenant,omitempty"`
	Recipient string `json:"recipient,omitempty"`
}

// Report is what a recount found and did, as the CLI's --json and the
// operator's route show it.
type Report struct {
	Tenant    string `json:"tenant,omitempty"`
	Recipient string `json:"recipient,omitempty"`
	// Checked counts the counter rows recomputed.
	Checked int `json:"checked"`
	// Repaired counts the rows that were wrong and are right now.
	Repaired int `json:"repaired"`
	// Drifted lists them (the first store.MaxInboxDrifts).
	Drifted []Drift `json:"drifted"`
}

// Drift is one counter a recount set right.
type Drift struct {
	Tenant    string `json:"tenant"`
	Recipient string `json:"recipient"`
	Was       Badge  `json:"was"`
	Now       Badge  `json:"now"`
}

// Badge is a counter row: the unread count and the newest item's seq.
type Badge struct {
	Unread int64 `json:"unread"`
	Seq    int64 `json:"seq"`
}

// Run recounts the counters p selects.
func Run(ctx context.Context, st Store, p Params, m *metrics.Metrics, logger *slog.Logger) (Report, error) {
	if p.Recipient != "" && p.Tenant == "" {
		return Report{}, ErrRecipientWithoutTenant
	}
	if logger == nil {
		logger = slog.Default()
	}
	res, err := st.InboxRecount(ctx, store.InboxRecountParams{Tenant: p.Tenant, Recipient: p.Recipient})
	if err != nil {
		return Report{}, fmt.Errorf("recount inbox counters: %w", err)
	}
	m.InboxRecountRepaired(res.Repaired)
	rep := Report{Tenant: p.Tenant, Recipient: p.Recipient, Checked: res.Checked, Repaired: res.Repaired, Drifted: []Drift{}}
	for _, d := range res.Drifted {
		rep.Drifted = append(rep.Drifted, Drift{Tenant: d.Tenant, Recipient: d.Recipient,
			Was: Badge{Unread: d.Was.Unread, Seq: d.Was.Seq}, Now: Badge{Unread: d.Now.Unread, Seq: d.Now.Seq}})
	}
	level := slog.LevelInfo
	if res.Repaired > 0 {
		level = slog.LevelWarn
	}
	logger.LogAttrs(ctx, level, "recount: inbox counters recomputed",
		slog.Int("checked", res.Checked), slog.Int("repaired", res.Repaired))
	return rep, nil
}

// WriteText writes the report for a person.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	scope := "every tenant"
	switch {
	case r.Recipient != "":
		scope = fmt.Sprintf("tenant %s, recipient %s", r.Tenant, r.Recipient)
	case r.Tenant != "":
		scope = "tenant " + r.Tenant
	}
	fmt.Fprintf(&b, "inbox counters of %s: %d checked, %d repaired\n", scope, r.Checked, r.Repaired)
	for _, d := range r.Drifted {
		fmt.Fprintf(&b, "  %s %s: unread %d → %d, seq %d → %d\n", d.Tenant, d.Recipient, d.Was.Unread, d.Now.Unread, d.Was.Seq, d.Now.Seq)
	}
	if n := r.Repaired - len(r.Drifted); n > 0 {
		fmt.Fprintf(&b, "  … and %d more\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

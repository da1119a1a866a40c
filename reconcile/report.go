package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/store"
)

// WriteText writes the report for a person: what was counted, what is
// unowned, repaired and unknown, and a last line saying whether everything
// is accounted for.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "reconciliation by %s, %s to %s (%s)\n", r.RunBy, r.StartedAt.Format(time.RFC3339),
		r.FinishedAt.Format(time.RFC3339), r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
	fmt.Fprintf(&b, "accepted     %d notifications, %d planned sends\n", r.Accepted, r.PlannedSends)
	states := slices.SortedFunc(maps.Keys(r.ByState), func(a, b string) int {
		return cmp.Or(cmp.Compare(r.ByState[b], r.ByState[a]), cmp.Compare(a, b))
	})
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %d", s, r.ByState[s]))
	}
	fmt.Fprintf(&b, "by state     %s\n", orNone(strings.Join(parts, ", ")))
	fmt.Fprintf(&b, "unowned      %d%s\n", r.Unowned, r.byKind(r.UnownedByKind, r.UnownedSample))
	fmt.Fprintf(&b, "repaired     %d%s\n", r.Repaired, r.byKind(r.RepairedByKind, nil))
	fmt.Fprintf(&b, "unknown      %d", r.Unknown)
	if r.Unknown > 0 {
		fmt.Fprintf(&b, " (ended, outcome unknown: settled by the provider's report or look-up where it has one, by a receipt, or by hand): %s",
			strings.Join(r.UnknownSample, ", "))
		if int64(len(r.UnknownSample)) < r.Unknown {
			b.WriteString(", …")
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "overdue      %d PENDING past the grace (owned by the claimers, behind)\n", r.Overdue)
	fmt.Fprintf(&b, "event keys   %d taken over since the last run (an owner's lease ran out with nothing sent)\n", r.EventKeysTakenOver)
	if r.Accounted() {
		b.WriteString("every accepted notification is accounted for\n")
	} else {
		fmt.Fprintf(&b, "%d unaccounted for: nothing will move them on\n", r.Unowned)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// byKind lists the kinds with a count, each with its sampled ids.
func (r Report) byKind(counts map[string]int64, samples map[string][]string) string {
	var parts []string
	for _, k := range Kinds {
		if counts[k] == 0 {
			continue
		}
		p := fmt.Sprintf("%s %d", k, counts[k])
		if ids := samples[k]; len(ids) > 0 {
			p += ": " + strings.Join(ids, ", ")
			if int64(len(ids)) < counts[k] {
				p += ", …"
			}
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Loop runs a reconciliation whenever the newest kept run started interval
// or more ago, or none was kept, until ctx is done. It checks every tenth
// of interval (between 10 milliseconds and a minute), and only while
// isLeader (nil: always) says this process leads, so one process of a
// database runs it. Because it goes by the kept runs, a restart or a new
// leader does not run it again early, and a `herald reconcile` on the
// command line counts as a run.
func (r *Reconciler) Loop(ctx context.Context, interval time.Duration, isLeader func() bool) {
	check := min(max(interval/10, 10*time.Millisecond), time.Minute)
	if r.checkEvery > 0 {
		check = r.checkEvery
	}
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		if isLeader == nil || isLeader() {
			r.runIfDue(ctx, interval)
		}
		if r.checked != nil {
			r.checked()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runIfDue runs a reconciliation if the last kept one started interval or
// more ago.
func (r *Reconciler) runIfDue(ctx context.Context, interval time.Duration) {
	last, err := r.Store.ReconcileRunLast(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		if ctx.Err() == nil {
			r.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile: reading the last run failed", slog.Any("error", err))
		}
		return
	case r.Clock.Now().Sub(last.StartedAt) < interval:
		return
	}
	if _, err := r.Run(ctx); err != nil && ctx.Err() == nil {
		r.Logger.LogAttrs(ctx, slog.LevelError, "reconcile: run failed", slog.Any("error", err))
	}
}

// Package reconcilewalk is the page loop both store drivers run for
// store.Reconciler.ReconcileCount: it walks the notifications in id order,
// a page at a time, each page in a short read-only transaction of its own,
// adds each page's groups to the counts and, only for a page that found
// something, reads that page's findings up to the sample size. The drivers
// supply the SQL and their read-only transaction (NewPages over a
// QueryFunc, in a Snapshot); the loop, the sampling rule and the pacing
// are written once.
//
// Why a transaction per page and not one for the whole count: a paced
// count takes tens of seconds on a large database, and a transaction held
// that long keeps PostgreSQL's vacuum from the dead rows of the queue
// tables the claimers walk (and SQLite's checkpoints from the WAL), and
// holds locks a migration's ALTER TABLE would queue behind, with every
// intake statement behind that. Each notification is read once, in its
// page, as it stood then; ids grow with time, so a notification accepted
// during the count lands in a later page and is counted too.
package reconcilewalk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Group is one row of a page's aggregate: the planned sends whose outbox
// row is in OutboxState ("" for a notification without one) and whose
// delivery row is in DeliveryState ("" for none).
type Group struct {
	OutboxState, DeliveryState string
	// N counts them; Scheduled those without a delivery row whose send_at
	// is after the snapshot's now; NoDelivery those finished (DONE) before
	// the grace with no delivery row; Overdue those PENDING past the grace.
	N, Scheduled, NoDelivery, Overdue int64
}

// Finding names the kind of finding a Pages.Sample reads.
type Finding int

const (
	MissingOutbox Finding = iota + 1
	NoDelivery
	Unknown
)

// Pages is a driver's reads inside one snapshot. A page is the
// notifications with after < id <= last.
type Pages interface {
	// Bound returns the last id of the (up to) n notifications after
	// after, in id order, and how many there are; 0 past the end.
	Bound(ctx context.Context, after string, n int) (last string, count int64, err error)
	// Groups returns the page's aggregate, grouped by the two states.
	Groups(ctx context.Context, after, last string) ([]Group, error)
	// Sample returns up to limit findings of kind f in the page, in id order.
	Sample(ctx context.Context, f Finding, after, last string, limit int) ([]store.ReconcileFinding, error)
}

// Snapshot runs read in a read-only transaction of the driver's, with the
// Pages of that transaction.
type Snapshot func(ctx context.Context, read func(Pages) error) error

// Walk counts every page as of now, each in a snapshot of its own.
func Walk(ctx context.Context, p store.ReconcileCountParams, now time.Time, snapshot Snapshot) (store.ReconcileCounts, error) {
	c := store.ReconcileCounts{Now: now, ByState: map[string]int64{}}
	for after := ""; ; {
		began := time.Now()
		var last string
		err := snapshot(ctx, func(pages Pages) (err error) {
			last, err = page(ctx, p, &c, pages, after)
			return err
		})
		if err != nil {
			return store.ReconcileCounts{}, err
		}
		if last == "" {
			return c, nil
		}
		if p.Pace != nil {
			if err := p.Pace(ctx, time.Since(began)); err != nil {
				return store.ReconcileCounts{}, err
			}
		}
		after = last
	}
}

// page adds the page after after to c and returns its last id, "" past
// the end.
func page(ctx context.Context, p store.ReconcileCountParams, c *store.ReconcileCounts, pages Pages, after string) (string, error) {
	last, n, err := pages.Bound(ctx, after, p.PageOrDefault())
	if err != nil {
		return "", fmt.Errorf("reconcile: bound a page: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	groups, err := pages.Groups(ctx, after, last)
	if err != nil {
		return "", fmt.Errorf("reconcile: count a page: %w", err)
	}
	c.Accepted += n
	found := map[Finding]int64{}
	for _, g := range groups {
		c.AddGroup(g.OutboxState, g.DeliveryState, g.N, g.Scheduled)
		c.NoDelivery.Count += g.NoDelivery
		c.Overdue += g.Overdue
		found[NoDelivery] += g.NoDelivery
		switch {
		case g.OutboxState == "":
			found[MissingOutbox] += g.N
		case g.DeliveryState == "UNKNOWN":
			found[Unknown] += g.N
			c.Unknown.Count += g.N
		}
	}
	for _, f := range []struct {
		kind  Finding
		into  *store.ReconcileFindings
		limit int
	}{
		{MissingOutbox, &c.MissingOutbox, p.SampleOrDefault()}, {NoDelivery, &c.NoDelivery, p.SampleOrDefault()},
		{Unknown, &c.Unknown, p.UnknownSampleOrDefault()},
	} {
		room := f.limit - len(f.into.Sample)
		if found[f.kind] == 0 || room <= 0 {
			continue
		}
		rows, err := pages.Sample(ctx, f.kind, after, last, room)
		if err != nil {
			return "", fmt.Errorf("reconcile: read a page's findings: %w", err)
		}
		f.into.Sample = append(f.into.Sample, rows...)
	}
	return last, nil
}

// Rows is what both drivers' result sets offer.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanGroups reads a page's aggregate: per row the outbox state, the
// delivery state and Group's four counts, in that order.
func ScanGroups(rows Rows) ([]Group, error) {
	var out []Group
	for rows.Next() {
		var g Group
		if err := rows.Scan(&g.OutboxState, &g.DeliveryState, &g.N, &g.Scheduled, &g.NoDelivery, &g.Overdue); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// ScanFindings reads findings: per row the notification id, the message
// id, the channel, the tenant and the kind, in that order.
func ScanFindings(rows Rows) ([]store.ReconcileFinding, error) {
	var out []store.ReconcileFinding
	for rows.Next() {
		var x store.ReconcileFinding
		var ch string
		if err := rows.Scan(&x.NotificationID, &x.MessageID, &ch, &x.Tenant, &x.Kind); err != nil {
			return nil, err
		}
		x.Channel = heraldtype.Channel(ch)
		out = append(out, x)
	}
	return out, rows.Err()
}

// Queries are a driver's statements for a page, each with the parameters
// its driver's doc says: Bound (after, n), Groups (now, after, last,
// handed-off threshold), and the findings' MissingOutbox and Unknown
// (after, last, limit) and NoDelivery (after, last, limit, threshold).
type Queries struct {
	Bound, Groups, MissingOutbox, NoDelivery, Unknown string
}

// QueryFunc runs q with args in the count's snapshot and returns its rows
// and how to release them.
type QueryFunc func(ctx context.Context, q string, args ...any) (rows Rows, release func(), err error)

// NewPages returns the Pages a driver's queries read through query, with
// now and the hand-off threshold (now minus the grace) in the driver's
// types.
func NewPages(query QueryFunc, qs Queries, now, handedOff any) Pages {
	return &sqlPages{query: query, qs: qs, now: now, handedOff: handedOff}
}

type sqlPages struct {
	query          QueryFunc
	qs             Queries
	now, handedOff any
}

func (p *sqlPages) Bound(ctx context.Context, after string, n int) (string, int64, error) {
	rows, release, err := p.query(ctx, p.qs.Bound, after, n)
	if err != nil {
		return "", 0, err
	}
	defer release()
	var last string
	var count int64
	if rows.Next() {
		err = rows.Scan(&last, &count)
	}
	return last, count, errors.Join(err, rows.Err())
}

func (p *sqlPages) Groups(ctx context.Context, after, last string) ([]Group, error) {
	rows, release, err := p.query(ctx, p.qs.Groups, p.now, after, last, p.handedOff)
	if err != nil {
		return nil, err
	}
	defer release()
	return ScanGroups(rows)
}

func (p *sqlPages) Sample(ctx context.Context, f Finding, after, last string, limit int) ([]store.ReconcileFinding, error) {
	q, args := p.qs.Unknown, []any{after, last, limit}
	switch f {
	case MissingOutbox:
		q = p.qs.MissingOutbox
	case NoDelivery:
		q, args = p.qs.NoDelivery, append(args, p.handedOff)
	}
	rows, release, err := p.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer release()
	return ScanFindings(rows)
}

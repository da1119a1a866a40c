package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Campaigns keeps campaigns (DESIGN §8, package campaign): one kind sent
// to many recipients. A campaign is created DRAFT, takes pages of
// recipients while it is DRAFT, is started (RUNNING) and fanned out in
// batches by the leader (CampaignFanOut), each batch its own short
// transaction, until it is DONE; a cancel ends it CANCELLED at any point.
//
// Exactly one notification per recipient: a recipient is added once
// (unique per campaign, a repeated page adds nothing), with its
// notification id fixed then; the fan-out writes recipients in seq order
// and moves the campaign's cursor (every recipient up to it has its
// notification) in the transaction that wrote them, so a batch that fails
// or a process that dies mid-batch leaves nothing of it, and the next
// batch starts where the last committed one ended. The notification's
// primary key is the last guard: a write of an id that exists fails its
// batch.
type Campaigns interface {
	// CampaignCreate writes a DRAFT campaign with its first recipients, or
	// reports the campaign an earlier create with the same idempotency key
	// made (Replayed) or that the key was used for another request
	// (Conflict); either way it then writes nothing. ErrCampaignFull when
	// the first page alone is past p.MaxRecipients: nothing is written.
	CampaignCreate(ctx context.Context, p CampaignCreateParams) (CampaignCreateResult, error)
	// CampaignAddRecipients adds a page of recipients to a DRAFT
	// campaign; one it has already is left as it is. It returns how many
	// were new. ErrNotFound for no such campaign of the tenant,
	// ErrCampaignState when it is no longer DRAFT or has reached its
	// deadline (DraftExpiresAt), ErrCampaignFull when the
	// new ones would take the campaign past p.MaxRecipients (then nothing
	// of the page is written).
	CampaignAddRecipients(ctx context.Context, p CampaignAddParams) (int, error)
	// CampaignStart moves a DRAFT campaign to RUNNING and returns it; a
	// RUNNING or DONE one is returned as it is. ErrCampaignState for a
	// CANCELLED one, or a draft that has reached its deadline
	// (DraftExpiresAt; CampaignsExpireDrafts ends it).
	CampaignStart(ctx context.Context, tenant, id string) (Campaign, error)
	// CampaignCancel ends a campaign CANCELLED: no recipient not yet
	// fanned out gets a notification, and every send of its notifications
	// that has not begun (no delivery row, or one waiting in RETRY_WAIT or
	// PARKED) ends SUPPRESSED(CANCELLED), the single cancel's guarded
	// write, set-based. It reports the campaign as it was at that moment.
	// Cancelling again writes nothing and reports it as it is now.
	CampaignCancel(ctx context.Context, tenant, id string) (CampaignCancelResult, error)
	// CampaignGet returns a tenant's campaign with its send counts.
	CampaignGet(ctx context.Context, tenant, id string) (Campaign, error)
	// CampaignList returns up to p.Limit of a tenant's campaigns with
	// their send counts, newest first by (CreatedAt, ID), after p.Before
	// when set, in p.State when set.
	CampaignList(ctx context.Context, p CampaignListParams) ([]Campaign, error)
	// CampaignsRunning returns up to limit RUNNING campaigns, the
	// earliest started first, after after (nil: from the first): the
	// fan-out's work, read a page at a time (CampaignRef.Started and ID
	// are the page's key).
	CampaignsRunning(ctx context.Context, after *CampaignRef, limit int) ([]CampaignRef, error)
	// CampaignFanOut writes the notifications and outbox rows of the next
	// p.Limit recipients of a RUNNING campaign in one transaction and
	// moves its cursor and enqueued counter in the same one; once no
	// recipient is left it ends the campaign DONE.
	CampaignFanOut(ctx context.Context, p CampaignFanOutParams) (CampaignFanOutResult, error)
	// CampaignBatches divides the recipients of a RUNNING campaign after
	// its cursor (or after seq *after, when set) into up to count ranges of
	// size recipients each, in seq order, the last one ending at the
	// campaign's last recipient: the bounds of batches the runner writes
	// side by side (CampaignFanOutParams.Range). The runner reads the
	// bounds of its next batches after the last of those it is writing
	// (after), so that they are ready when those commit. None when no
	// recipient is left or the campaign is not RUNNING; ErrNotFound for no
	// such campaign.
	CampaignBatches(ctx context.Context, tenant, id string, after *int64, size, count int) ([]CampaignRange, error)
	// CampaignsExpireDrafts ends CANCELLED, with Reason
	// CampaignDraftExpired, up to limit DRAFT campaigns whose
	// DraftExpiresAt has come (by the store's clock, the one that fixed
	// it), the earliest first, and returns them: a campaign never started
	// does not wait for ever (DESIGN §3). A DRAFT campaign has no
	// notification yet, so there is nothing else to stop. One being
	// written at that moment (a page, a start, a cancel) is left to that
	// write: expired only if it is still DRAFT afterwards, at a later call.
	CampaignsExpireDrafts(ctx context.Context, limit int) ([]CampaignRef, error)
}

// CampaignRange is a batch's recipients: seq in (After, Upto].
type CampaignRange struct {
	After, Upto int64
}

// CampaignRanges makes CampaignBatches' ranges from the cursor, the seqs
// that end the full batches after it, and the last recipient read (nil:
// none): one range per end, and a shorter last one up to last.
func CampaignRanges(cursor int64, ends []int64, last *int64) []CampaignRange {
	var out []CampaignRange
	for _, e := range ends {
		out = append(out, CampaignRange{After: cursor, Upto: e})
		cursor = e
	}
	if last != nil && *last > cursor {
		out = append(out, CampaignRange{After: cursor, Upto: *last})
	}
	return out
}

// ErrCampaignBehind is a ranged batch's refusal (CampaignFanOutParams.Range)
// when the campaign's cursor does not stand at the range's start once the
// batch before it has ended: that batch failed, or the campaign was fanned
// out past the range meanwhile. The batch wrote nothing.
var ErrCampaignBehind = errors.New("store: the campaign's cursor is not at the batch's start")

// ErrCampaignBusy is a fan-out batch that gave up waiting and wrote
// nothing: for a lock (on PostgreSQL, past its lock timeout: a cancel, or
// a second writer of the campaign, held the campaign's row or rows the
// batch must write) or for its turn (CampaignFanOutParams.Turn returned
// it). Nothing is wrong with the campaign: the next round starts again at
// its cursor.
var ErrCampaignBusy = errors.New("store: the fan-out batch gave up waiting for a lock or its turn")

// ErrCampaignState is returned for a write the campaign's state refuses.
var ErrCampaignState = errors.New("store: the campaign's state does not allow this")

// ErrCampaignFull is returned for a page whose new recipients would take
// the campaign's total past its cap (MaxRecipients). The cap is checked
// in the transaction that adds the page, after its inserts, against the
// total they leave: recipients the campaign has already count nothing, so
// a page sent again is accepted, and two pages at once take turns (the
// campaign row's lock on PostgreSQL, the single writer on SQLite), so
// neither can slip past the cap beside the other.
var ErrCampaignFull = errors.New("store: the page would take the campaign past its most recipients")

// CampaignListParams select a page of a tenant's campaigns (CampaignList).
type CampaignListParams struct {
	Tenant string
	// State, when set, is the only state listed.
	State string
	// Before is the last campaign of the previous page: this page holds
	// the campaigns that sort after it, (CreatedAt, ID) descending.
	Before *ListPosition
	Limit  int
}

// Position is c's place in a listing of campaigns (CampaignListParams.Before).
func (c Campaign) Position() ListPosition { return ListPosition{CreatedAt: c.CreatedAt, ID: c.ID} }

// Campaign states.
const (
	CampaignDraft     = "DRAFT"
	CampaignRunning   = "RUNNING"
	CampaignDone      = "DONE"
	CampaignCancelled = "CANCELLED"
)

// DefaultCampaignDraftTTL is CampaignCreateParams.DraftTTL's default: a
// week to start a campaign after creating it.
const DefaultCampaignDraftTTL = 7 * 24 * time.Hour

// CampaignDraftExpired is the Reason of a campaign that was never started
// and was ended CANCELLED when its draft's time ran out
// (CampaignsExpireDrafts); a campaign a client cancelled has none.
const CampaignDraftExpired = "DRAFT_EXPIRED"

// CampaignCreateParams is one POST /v1/campaigns.
type CampaignCreateParams struct {
	ID     string
	Tenant string
	// IdempotencyKey and RequestHash: the same key with the same hash is
	// a replay, with another hash a conflict.
	IdempotencyKey string
	RequestHash    string
	Kind           string
	Lane           heraldtype.Lane
	// Scope is given to each of the campaign's notifications
	// (NotificationCreateParams.Scope).
	Scope string
	// Channels are the kind's channels in its order, Fallback whether they
	// are a chain (FallbackSteps). The inbox channel is not supported.
	Channels []heraldtype.Channel
	Fallback bool
	Params   json.RawMessage
	SendAt   *time.Time
	// Recipients is the first page (may be empty).
	Recipients []CampaignRecipient
	// DraftTTL fixes the campaign's deadline to start, DraftExpiresAt: its
	// creation (by the store's clock) + DraftTTL. 0 is
	// DefaultCampaignDraftTTL.
	DraftTTL time.Duration
	// MaxRecipients caps the campaign's recipients (ErrCampaignFull for a
	// first page past it, and nothing is written); 0 is no cap.
	MaxRecipients int64
}

// CampaignAddParams is one page of recipients for a campaign.
type CampaignAddParams struct {
	Tenant     string
	ID         string
	Recipients []CampaignRecipient
	// MaxRecipients caps the campaign's total (ErrCampaignFull); 0 is no
	// cap.
	MaxRecipients int64
}

// DraftTTLOrDefault is p.DraftTTL (at least a millisecond, the stores'
// precision), or DefaultCampaignDraftTTL for none.
func (p CampaignCreateParams) DraftTTLOrDefault() time.Duration {
	if p.DraftTTL > 0 {
		return max(p.DraftTTL, time.Millisecond)
	}
	return DefaultCampaignDraftTTL
}

// CampaignCreateResult is what CampaignCreate did.
type CampaignCreateResult struct {
	// Outcome is Created, Replayed (ID is the earlier campaign's) or
	// Conflict.
	Outcome CreateOutcome
	ID      string
}

// CampaignRecipient is one recipient of a campaign.
type CampaignRecipient struct {
	Recipient string
	// NotificationID is the id its notification gets (fixed when it is
	// added).
	NotificationID string
	// Params are the notification's params when the recipient has its own
	// (already merged over the campaign's); nil for the campaign's.
	Params json.RawMessage
}

// Campaign is a campaign as GET /v1/campaigns/{id} shows it.
type Campaign struct {
	ID     string
	Tenant string
	Kind   string
	Lane   heraldtype.Lane
	Scope  string
	State  string
	// Params are the campaign's own params (a recipient's override key
	// by key).
	Params json.RawMessage
	// Total counts the recipients added, Enqueued those fanned out.
	Total    int64
	Enqueued int64
	// Counts are its notifications' sends by outcome.
	Counts    CampaignCounts
	SendAt    *time.Time
	CreatedAt time.Time
	StartedAt *time.Time
	EndedAt   *time.Time
	// DraftExpiresAt is the campaign's deadline to start, fixed at its
	// creation: from then a start or a page is refused, and a campaign
	// still DRAFT is ended CANCELLED (CampaignsExpireDrafts). Nil for a
	// campaign no longer DRAFT when drafts began to expire (migration 29,
	// SQLite 28).
	DraftExpiresAt *time.Time
	// Reason says why a CANCELLED campaign ended when a client did not
	// cancel it: CampaignDraftExpired. Empty otherwise.
	Reason string
}

// CampaignCounts counts a campaign's sends (one per outbox row: a push to
// three devices is three) by how they ended: Sent (PROVIDER_ACCEPTED,
// DELIVERED), Suppressed (SUPPRESSED, or a fallback step not needed),
// Failed (PERMANENT_FAILURE, RETRY_EXHAUSTED, or an outbox row that
// EXPIRED or FAILED unsent), Unknown (UNKNOWN). The others are under way.
type CampaignCounts struct {
	Sent, Suppressed, Failed, Unknown int64
}

// CampaignCancelResult is what a cancel found and did.
type CampaignCancelResult struct {
	// Campaign is the campaign as it was when the cancel took it: its
	// counts are the sends that had already ended.
	Campaign Campaign
	// Cancelled counts the sends the cancel ended SUPPRESSED(CANCELLED);
	// InFlight those it left because they were SENDING (a provider call
	// may be under way; they end as the sender records them).
	Cancelled int64
	InFlight  int64
	// Already: the campaign was CANCELLED before; nothing was written.
	Already bool
}

// CampaignRef names a campaign: a RUNNING one (CampaignsRunning), or a
// draft that has just expired (CampaignsExpireDrafts).
type CampaignRef struct {
	Tenant string
	ID     string
	// Lane is the campaign's kind's lane, whose quota paces its fan-out.
	Lane heraldtype.Lane
	// Started is when it was started: with ID, its place in the list of
	// RUNNING campaigns (CampaignsRunning).
	Started time.Time
}

// CampaignFanOutParams is one fan-out batch.
type CampaignFanOutParams struct {
	Tenant string
	ID     string
	// Limit is how many recipients the batch takes; at least 1.
	Limit int
	// Range, when set, is the batch's recipients instead of the Limit
	// after the cursor: bounds the runner read beforehand
	// (CampaignBatches), so that it can write a batch while the one before
	// it is still being written. The batch writes its recipients, then
	// moves the cursor from Range.After to Range.Upto, after the batch
	// before it has committed (on PostgreSQL it waits for it: the
	// campaign row's lock); if the cursor is not at Range.After then, it
	// writes nothing and returns ErrCampaignBehind. So the cursor still
	// moves in seq order only, and every recipient up to it has its
	// notification.
	Range *CampaignRange
	// Turn, when set, is called by a ranged batch before it takes the
	// campaign's lock to move the cursor, and the batch waits for it to
	// return: the runner's batch before it has ended by then, so the lock
	// is free and the cursor where that batch left it. On PostgreSQL it is
	// called after the batch's rows are written, unless the cursor already
	// stood at Range.After when the batch began (then it locks at once); a
	// store that writes one batch at a time (SQLite) calls it before the
	// batch begins. An error ends the batch with nothing written.
	//
	// Turn must return within a bounded time: on PostgreSQL the batch's
	// transaction stays open meanwhile, its rows written and uncommitted, a
	// wait the database cannot see (a writer blocked on those rows waits
	// until its lock timeout). The runner's gives up after
	// campaign.RunnerConfig.TurnTimeout with ErrCampaignBusy.
	Turn func(context.Context) error
	// BeforeCommit, when set (tests), runs inside the batch's transaction
	// after its writes; an error rolls the whole batch back, as a crash
	// there would.
	BeforeCommit func() error
}

// CampaignFanOutResult is what one batch wrote.
type CampaignFanOutResult struct {
	// Recipients counts the recipients the batch took, Notifications and
	// Outbox the rows it wrote.
	Recipients    int
	Notifications int
	Outbox        int
	// Done: no recipient is left; the campaign is DONE (or was not
	// RUNNING: cancelled, or done before).
	Done bool
	Lane heraldtype.Lane
}

// Package campaign sends one kind to many recipients (DESIGN §8,
// issue 12): POST /v1/campaigns creates a DRAFT campaign, pages of up to
// 10,000 recipients are added to it, a start makes it RUNNING, and the
// leader's Runner fans it out into ordinary notifications and outbox rows,
// which then go through the normal pipeline: every send policy applies to
// them as to any notification of the kind (quiet hours for marketing,
// consent, suppression, rate limits, lanes), checked at send time.
//
// # One notification per recipient
//
// A recipient is added to a campaign once: (campaign, recipient) is
// unique, and a page sent again adds nothing (idempotent per recipient).
// Its notification's id is fixed when it is added and stored with it (a
// page's ids ascend in the page's order, ids.Ordered, so the fan-out's
// key entries land side by side), and its params are merged then (the
// recipient's keys over the campaign's).
//
// The fan-out (store.Campaigns.CampaignFanOut) takes the next Batch
// recipients after the campaign's cursor, in the order they were added,
// and writes their notifications and outbox rows with two set-based
// statements (INSERT … SELECT from the recipients; on PostgreSQL one
// statement with the outbox rows in a data-modifying CTE), then moves the
// cursor and the enqueued counter, all in one short transaction. A batch
// that fails, or a process that dies mid-batch, leaves nothing of that
// batch; the next round starts at the cursor again. Nothing holds a
// transaction open for the whole campaign.
//
// A second writer (a leader that lost its lock without knowing) may fan
// the same campaign out beside the leader, its batches cut at other bounds
// (each process's quota grant sizes its batches). On PostgreSQL the two
// can then wait for each other in a cycle the database cannot see: one's
// batch holds the campaign row's lock and blocks on the other's
// uncommitted notification rows, whose batch waits in Go for its turn
// behind a batch that waits for the campaign row's lock. So no wait of a
// batch is unbounded: a lock wait ends after a few seconds (lock_timeout,
// store/postgres fanOutLockTimeout) and a wait for its turn after
// RunnerConfig.TurnTimeout. A batch that gives up writes nothing
// (store.ErrCampaignBusy); the runner logs it as a retry, and the next
// round starts at the cursor, past whatever the other writer committed. A
// batch whose range the other writer took first is refused
// (store.ErrCampaignBehind), and an id written twice fails its batch (the
// notification's primary key).
//
// On PostgreSQL the runner writes batches side by side (RunnerConfig.Parallel,
// store.CampaignFanOutParams.Range): a batch's inserts keep one backend busy,
// and two use the machine's second core. It reads the bounds of the next
// Parallel×4 batches first (CampaignBatches) and runs them in a window:
// Parallel write at once, and a batch that has written its rows waits for
// its turn (CampaignFanOutParams.Turn: the batch before it has ended) while
// the next begins writing on another connection, so no backend sits idle
// waiting for the slowest of a pair. The bounds of the next window are
// read while a window writes, after its last batch (CampaignBatches'
// after), and used if that window wrote every batch: read at the cursor
// between windows, they took tens of milliseconds with no batch writing.
// If another writer moved the cursor meanwhile, the window's first batch
// finds it past its start and is refused (store.ErrCampaignBehind); the
// runner reads the bounds again at the cursor, with no failure counted.
// A batch takes the campaign row's lock only at its turn, and commits
// only if the batch before it moved the
// cursor to its start: one cursor still says how far the campaign went, and
// a kill in any batch leaves nothing of the batches not committed
// (TestFanOutSurvivesAKill). A million recipients took 8.5–13.3 s this way
// (median 9.4 s over fourteen runs) against 9.3–12.7 s (median 10.3 s) for
// pairs with a barrier after each, alternated on 2026-12-04; 12.3–12.5 s one
// batch after the other (docs/campaigns.md).
//
// # States and counts
//
// DRAFT → RUNNING (start) → DONE, or CANCELLED from any of them. A DRAFT
// has an owner and a deadline like every state (DESIGN §3): the client
// starts or cancels it, and failing that the leader's Runner ends it
// CANCELLED (Reason DRAFT_EXPIRED) at its first round past its deadline:
// its creation + Service.DraftTTL (config campaign_draft_ttl, default 7
// days), written into the campaign row when it is created, by the store's
// clock, and compared with the same clock. So GET shows the deadline the
// runner keeps (store.Campaign.DraftExpiresAt), no process's clock skew or
// later change of the setting moves it, and pages do not either. From the
// deadline on, the store refuses a start or a page (ErrState), so the
// deadline holds to the moment even before the runner's round. DONE means
// the fan-out has finished: every recipient has its notification. It does
// not wait for the sends themselves; their outcome is in the counts (sent,
// suppressed, failed, unknown; one per planned send, so a push to three
// devices counts three).
//
// Every count is kept, none counted when read. total and enqueued move
// with the page and batch writes. The send counts (table campaign_counts)
// move in the transaction of whatever write ends a send, through triggers
// on deliveries and outbox (migration 27 of each store): a send's outcome
// is its delivery's state when it has one, else its outbox row's, and a
// write that changes it takes the send out of its old count and into its
// new. Triggers rather than the writes themselves because a dozen
// statements of a dozen packages end sends (the sender, a cancel, the
// sweeps, reports, the parked tools, erasure, fallback); the conformance
// suite checks the kept counts against the rows after each kind of write.
// On PostgreSQL each backend counts into a row of its own (slot = its pid),
// so concurrent senders never wait on one counter row; a read sums them.
// The triggers run for a campaign's sends only: a delivery names its
// campaign (deliveries.campaign_id, written by the claims), and a claim,
// which has no outcome yet, runs none. On PostgreSQL a delivery's change
// of state is counted once per statement (migration 28: a statement-level
// trigger over the statement's transition tables): the sender's merged
// result write, which ends a few dozen sends in one UPDATE, moves each
// campaign's counter row once, by their sum, where a row trigger ran a
// statement and updated the same counter row for each send (the drain 6–8%
// slower than without counts; with the statement's trigger 4–5% in most
// runs, docs/campaigns.md). That trigger runs for every UPDATE of
// deliveries and ends at once when no row it changed is a campaign's;
// notifications off a campaign measured unchanged.
//
// # Cancel
//
// A cancel locks the campaign row (so no batch commits after it), reads
// the counts as they are (what had already gone, reported in its answer),
// marks the campaign CANCELLED so no further recipient is fanned out, and
// ends every send that has not begun with the single cancel's guarded
// write (package cancel), set-based: SUPPRESSED(CANCELLED) where there is
// no delivery row yet or one waiting (RETRY_WAIT, PARKED), never over a
// SENDING claim or a result; those in flight are counted and end as the
// sender records them. A later fallback step still WAITING is SKIPPED,
// which is what a cancelled earlier step's end would do to it. On
// PostgreSQL the counts it reports, the sends it ended and those in
// flight come from one statement's snapshot: a send claimed or ended
// while the statement runs (seconds, for a million) is one it found under
// way and left, so it is reported in flight, and the three always add up
// to the campaign's sends.
//
// # Size
//
// Service.MaxRecipients (config limits.campaign_max_recipients, default
// 1,000,000) caps a campaign's recipients. The store decides it, in the
// transaction that adds the page (store.ErrCampaignFull): after the
// page's inserts it has the total they leave, which counts only the new
// recipients (a page sent again is accepted at the cap), and the pages of
// one campaign take turns there (the row lock on PostgreSQL, the single
// writer on SQLite), so two at once cannot both pass. A check here, before
// the store, could do neither. A page over the cap is rolled back whole;
// on SQLite, as any refused write, it makes the writer rerun its group's
// other writes one by one.
//
// # Not supported yet
//
// Kinds with the inbox channel (the inbox item's text is rendered per
// recipient at intake; the fan-out renders nothing) are refused at create
// with 422. Pages are accepted while the campaign is DRAFT only.
package campaign

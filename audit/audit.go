// Package audit records who did what through the admin and operator
// routes, and serves the record (GET /v1/admin/audit).
//
// # What is recorded
//
// An entry per admin action that succeeded (a 2xx answer), or that took
// effect in part before it failed (a handler says so with Took): a key created
// or revoked (key.create, key.revoke), parked messages requeued or
// discarded (parked.requeue, parked.discard), an UNKNOWN delivery settled
// by a person (delivery.settle), a recipient erased
// (recipient.erase: with what its committed batches erased, also when a
// later batch failed) and an inbox recount (ops.inbox_recount). Each says who
// (the acting key's id and name: a stored key's id, "config:…" or
// "operator:…" for a configured one, never the key), what (the action and
// its target), when (the store's time), from where (the request's remote
// address; behind a proxy, the proxy's) and the figures of the answer
// where there are any. Consent changes are not here: the consent history
// (package consent) records each one with the key that made it.
//
// # Recipients by digest
//
// A recipient id is the tenant's own name for a person, often an account
// number or an e-mail address, and an erasure must not leave it behind in
// a log nobody can delete from. So an entry names a recipient by a digest,
// "rcpt:" and the first 16 hex digits of SHA-256(tenant, 0x00, recipient)
// (Recipient): whoever holds the id can find its entries. The digest is
// unsalted and unkeyed, so it pseudonymises rather than anonymises: an id
// that can be guessed (a sequential number, a phone number, an e-mail
// address) is recovered by hashing candidates with the tenant. Tenants
// should use opaque recipient ids. Message ids and key ids are herald's own
// and carry nothing personal.
//
// # Append-only
//
// The store has no update or delete of entries, and both drivers' tables
// refuse UPDATE and DELETE with a trigger (PostgreSQL: TRUNCATE too). The
// entry is written after the action committed, not in its transaction: a
// store failure in between loses the entry (logged at error level, with
// the action and its key id), never the action.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/store"
)

// The actions.
const (
	KeyCreate      = "key.create"
	KeyRevoke      = "key.revoke"
	ParkedRequeue  = "parked.requeue"
	ParkedDiscard  = "parked.discard"
	DeliverySettle = "delivery.settle"
	RecipientErase = "recipient.erase"
	InboxRecount   = "ops.inbox_recount"
)

// Recipient is the name an entry gives a recipient: a digest, not the id.
func Recipient(tenant, recipient string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + recipient))
	return "rcpt:" + hex.EncodeToString(sum[:8])
}

// DefaultTimeout bounds the write of one entry.
const DefaultTimeout = 5 * time.Second

// Log writes entries.
type Log struct {
	Store  store.Audit
	Logger *slog.Logger
	// Timeout bounds the write of one entry (it outlives the request, so
	// the request's end does not bound it). Defaults to DefaultTimeout.
	Timeout time.Duration
}

func (l *Log) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return DefaultTimeout
}

// Record appends an entry for r's caller (apikeys.From; the tenant is the
// key's). detail, when not nil, is marshalled as the entry's figures.
func (l *Log) Record(r *http.Request, action, target string, detail any) {
	if l == nil || l.Store == nil {
		return
	}
	p, _ := apikeys.From(r.Context())
	e := store.AuditEntry{Tenant: auth.Tenant(r.Context()), ActorKey: p.KeyID, ActorName: p.Name,
		Action: action, Target: target, Remote: r.RemoteAddr}
	if e.Tenant == "" {
		e.Tenant = p.Tenant
	}
	l.Append(r.Context(), e, detail)
}

// Append writes e, with detail, when not nil, marshalled as its figures
// ("{}" otherwise): Record's write, and the CLI's for its own actions. The
// action is done even if its caller has gone (a client hung up, a
// command's time ran out): so is its entry, whose write has a time of its
// own; a failure is logged at error level, never the action's.
func (l *Log) Append(ctx context.Context, e store.AuditEntry, detail any) {
	if l == nil || l.Store == nil {
		return
	}
	e.Detail = "{}"
	if detail != nil {
		if b, err := json.Marshal(detail); err == nil {
			e.Detail = string(b)
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout())
	defer cancel()
	if _, err := l.Store.AuditAppend(wctx, e); err != nil {
		l.Logger.LogAttrs(ctx, slog.LevelError, "audit: an entry was lost", slog.String("action", e.Action),
			slog.String("key_id", e.ActorKey), slog.Any("error", err))
	}
}

// Action is middleware that records action with the target target names
// once next answered 2xx, unless next said with Skip that it did nothing
// to record, or when next said with Took that the action took effect
// though it answers an error (a requeue that failed after it moved some
// messages). The entry's figures are the answer's status and those next
// gave Took.
func (l *Log) Action(action string, target func(*http.Request) string, next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		n := &note{figures: map[string]int{}}
		r = r.WithContext(context.WithValue(r.Context(), noteKey{}, n))
		next.ServeHTTP(sw, r)
		if ((sw.status == 0 || sw.status/100 == 2) && !n.skip) || len(n.figures) > 0 {
			var t string
			if target != nil {
				t = target(r)
			}
			n.figures["status"] = max(sw.status, http.StatusOK)
			l.Record(r, action, t, n.figures)
		}
	})
}

// note is what a handler tells Action about its action (Took, Skip).
type note struct {
	figures map[string]int
	skip    bool
}

type noteKey struct{}

// Took tells the audit middleware (Action) around r's handler that its
// action took effect, with these figures (at least one; none named "status"),
// whatever it answers: an action that failed part-way is recorded for
// what it did. Without the middleware it does nothing.
func Took(r *http.Request, figures map[string]int) {
	if n, ok := r.Context().Value(noteKey{}).(*note); ok {
		maps.Copy(n.figures, figures)
	}
}

// Skip tells the audit middleware around r's handler that its success did
// nothing to record (a discard that only removed what an earlier one,
// recorded, left). Without the middleware it does nothing.
func Skip(r *http.Request) {
	if n, ok := r.Context().Value(noteKey{}).(*note); ok {
		n.skip = true
	}
}

// PathValue is a target: the request's path value of that name.
func PathValue(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.PathValue(name) }
}

// RecipientPath is a target: the digest of the path's {recipient}.
func RecipientPath(r *http.Request) string {
	return Recipient(auth.Tenant(r.Context()), r.PathValue("recipient"))
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

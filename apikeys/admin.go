package apikeys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// MaxNameLen bounds a key's name.
const MaxNameLen = 100

// CreateParams is a key to make.
type CreateParams struct {
	Tenant, Name string
	Scopes       []string
	// ExpiresAt is zero for a key that does not expire.
	ExpiresAt time.Time
	// CreatedBy names who asks (an admin key's id, "cli").
	CreatedBy string
	// Now is the time an expiry must be after.
	Now time.Time
}

// ErrInvalid wraps what is wrong with CreateParams.
var ErrInvalid = errors.New("invalid key")

// InvalidDetail is what is wrong, of an error wrapping ErrInvalid: its
// message without the "invalid key: " in front.
func InvalidDetail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}

// invalidField is an ErrInvalid naming the request's field at fault (a
// problem's param).
type invalidField struct {
	field string
	err   error
}

func (e *invalidField) Error() string { return e.err.Error() }
func (e *invalidField) Unwrap() error { return e.err }

// invalid is ErrInvalid for field, as format says.
func invalid(field, format string, args ...any) error {
	return &invalidField{field, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)}
}

// InvalidField is the request field an ErrInvalid names ("" for none).
func InvalidField(err error) string {
	var f *invalidField
	if errors.As(err, &f) {
		return f.field
	}
	return ""
}

// Create makes and stores a key; key is the whole key, to show once.
func Create(ctx context.Context, st store.APIKeys, p CreateParams) (row store.APIKey, key string, err error) {
	switch {
	case p.Tenant == "" || len(p.Tenant) > 200 || !catalog.Printable(p.Tenant):
		return store.APIKey{}, "", invalid("tenant", "tenant must be 1..200 printable characters")
	case p.Name == "" || len(p.Name) > MaxNameLen || !catalog.Printable(p.Name):
		return store.APIKey{}, "", invalid("name", "name must be 1..%d printable characters", MaxNameLen)
	case !p.ExpiresAt.IsZero() && !p.ExpiresAt.After(p.Now):
		return store.APIKey{}, "", invalid("expires_at", "expires_at is already past")
	}
	scopes, err := ParseScopes(p.Scopes)
	if err != nil {
		return store.APIKey{}, "", invalid("scopes", "%v", err)
	}
	id, key, hash, err := New()
	if err != nil {
		return store.APIKey{}, "", err
	}
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	row, err = st.APIKeyCreate(ctx, store.APIKey{ID: id, Tenant: p.Tenant, Name: p.Name, Scopes: names, Hash: hash,
		CreatedBy: p.CreatedBy, ExpiresAt: p.ExpiresAt})
	if err != nil {
		return store.APIKey{}, "", err
	}
	return row, key, nil
}

// Admin serves a tenant's keys (admin scope), the caller's tenant only:
//
//	POST /v1/admin/keys              {"name", "scopes": [...], "expires_at"?} → 201 the key with "key": shown this once
//	GET  /v1/admin/keys              → {"keys": [...]} without secrets
//	POST /v1/admin/keys/{id}/revoke  → 200 the key, revoked (again: its first revoked_at); 404 for another tenant's
type Admin struct {
	Store  store.APIKeys
	Now    func() time.Time
	Logger *slog.Logger
	// Record, when set, writes the audit entry of a create or revoke.
	Record func(r *http.Request, action, target string, detail any)
}

// KeyBody is a key as the admin API shows it.
type KeyBody struct {
	ID        string     `json:"id"`
	Key       string     `json:"key,omitempty"`
	Tenant    string     `json:"tenant"`
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// Body is k as the admin API and the CLI show it (without the key).
func Body(k store.APIKey) KeyBody {
	b := KeyBody{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Scopes: k.Scopes, CreatedBy: k.CreatedBy, CreatedAt: k.CreatedAt}
	if !k.ExpiresAt.IsZero() {
		b.ExpiresAt = &k.ExpiresAt
	}
	if !k.RevokedAt.IsZero() {
		b.RevokedAt = &k.RevokedAt
	}
	if b.Scopes == nil {
		b.Scopes = []string{}
	}
	return b
}

type createBody struct {
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Create answers POST /v1/admin/keys.
func (a *Admin) Create(w http.ResponseWriter, r *http.Request) {
	var body createBody
	if !validate.DecodeJSON(w, r, &body, 4<<10, false) { // 400, 413 over 4 KiB
		return
	}
	p := CreateParams{Tenant: auth.Tenant(r.Context()), Name: body.Name, Scopes: body.Scopes, Now: a.Now()}
	if body.ExpiresAt != nil {
		p.ExpiresAt = body.ExpiresAt.UTC()
	}
	if me, ok := From(r.Context()); ok {
		p.CreatedBy = me.KeyID
	}
	row, key, err := Create(r.Context(), a.Store, p)
	switch {
	case errors.Is(err, ErrInvalid):
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: InvalidDetail(err), Param: InvalidField(err)})
		return
	case err != nil:
		a.Logger.LogAttrs(r.Context(), slog.LevelError, "apikeys: create failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	if a.Record != nil {
		a.Record(r, "key.create", row.ID, map[string]any{"name": row.Name, "scopes": row.Scopes})
	}
	b := Body(row)
	b.Key = key
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(b)
}

// List answers GET /v1/admin/keys.
func (a *Admin) List(w http.ResponseWriter, r *http.Request) {
	rows, err := a.Store.APIKeyList(r.Context(), auth.Tenant(r.Context()))
	if err != nil {
		a.Logger.LogAttrs(r.Context(), slog.LevelError, "apikeys: list failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	out := make([]KeyBody, 0, len(rows))
	for _, k := range rows {
		out = append(out, Body(k))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": out})
}

// Revoke answers POST /v1/admin/keys/{id}/revoke.
func (a *Admin) Revoke(w http.ResponseWriter, r *http.Request) {
	tenant := auth.Tenant(r.Context())
	if tenant == "" {
		problem.New(w, http.StatusUnauthorized, "a valid API key is required: Authorization: Bearer <key>")
		return
	}
	row, revoked, err := a.Store.APIKeyRevoke(r.Context(), tenant, r.PathValue("id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such key")
		return
	case err != nil:
		a.Logger.LogAttrs(r.Context(), slog.LevelError, "apikeys: revoke failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	// A revoke of a key revoked before changes nothing and answers the
	// key as it is, with no second audit entry.
	if a.Record != nil && revoked {
		a.Record(r, "key.revoke", row.ID, nil)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Body(row))
}

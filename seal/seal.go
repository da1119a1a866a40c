// Package seal encrypts personal data at rest: the contact fields of a
// profile, device tokens and params. herald seals a value where it enters
// (the profile, device and send handlers, the Go API, campaigns) and opens
// it where it is used (the sender, the non-production guard, the read
// handlers); the stores, the outbox, the RabbitMQ messages and the
// campaign fan-out carry sealed values as opaque text and never see the
// plain one.
//
// # Keys and format
//
// A Keyring holds the keys of config personal_data.keys: each an id and a
// secret from a file or the environment. The first seals; every key opens,
// so a new key can be put first while values sealed with the old one stay
// readable. The AES-256 key is HKDF-SHA256 of the secret. A sealed string
// is
//
//	hs1:<key id>:<base64url(nonce ‖ AES-256-GCM ciphertext)>
//
// so the key id is stored with the value, and a value sealed with a key
// the ring no longer holds is an error that names that id (ErrUnknownKey),
// never a wrong plain text. The GCM additional data binds a value to its
// purpose and tenant ("params", "address", "device"): a sealed phone
// number copied into another tenant's row, or into a params column, does
// not open. Params, which are a JSON object when plain, are sealed into a
// JSON string, so a sealed params value is still valid JSON wherever it
// travels (a PostgreSQL json column, a job's message body).
//
// A value without the prefix is plain: herald reads rows written before
// keys were configured, and seals them when Rekey walks the tables.
// Addresses and device tokens may not begin with the prefix
// (validate.Address refuses it), so a plain value is never taken for a
// sealed one.
//
// # Rotation
//
// Put the new key first, restart every process, then run `herald data
// rekey`: Rekey walks every table that holds sealed fields in bounded
// pages, in key order, and swaps each value not sealed with the first key
// (an older key's, or a plain one) for one that is, each swap conditional
// on the row still holding the value it read, so a write made meanwhile is
// never overwritten. It can be stopped and run again at any time; a run
// that finds nothing to change reports zero, and only then may the old
// key leave the ring.
//
// A nil *Keyring seals nothing and opens only plain values: herald without
// personal_data keys stores plain text, as before (a start-up warning says
// so when environment is production).
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Prefix begins every sealed string.
const Prefix = "hs1:"

// MinSecretLen is the shortest secret a key takes.
const MinSecretLen = 32

// Purposes: a sealed value opens only for the purpose it was sealed for.
const (
	Params  = "params"
	Address = "address"
	Device  = "device"
)

var (
	// ErrUnknownKey: the value was sealed with a key the ring does not
	// hold (its id is in the error).
	ErrUnknownKey = errors.New("seal: the value was sealed with a key this process does not hold")
	// ErrCorrupt: the value has the prefix but does not open (changed,
	// truncated, or sealed for another purpose or tenant).
	ErrCorrupt = errors.New("seal: the sealed value does not open")
	// ErrNoKeys: a sealed value met a process without keys.
	ErrNoKeys = errors.New("seal: the value is sealed and no personal_data keys are configured")
)

// unknownKeyError is ErrUnknownKey naming the key id.
type unknownKeyError struct{ id string }

func (e *unknownKeyError) Error() string { return fmt.Sprintf("%v (key id %q)", ErrUnknownKey, e.id) }
func (e *unknownKeyError) Unwrap() error { return ErrUnknownKey }

// Key is one key of the ring: its id (1..16 of a-z, 0-9, '-', '_') and its
// secret (at least MinSecretLen bytes).
type Key struct {
	ID     string
	Secret []byte
}

// Keyring seals with its first key and opens with any of them.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// New returns the ring of keys, the first of which seals. An id that is
// empty, too long, repeated or outside [a-z0-9_-], or a short secret, is
// an error that names the id, never the secret.
func New(keys []Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no keys")
	}
	k := &Keyring{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, key := range keys {
		if !ValidKeyID(key.ID) {
			return nil, fmt.Errorf("seal: key id %q: 1 to 16 of a-z, 0-9, '-' and '_'", key.ID)
		}
		if _, dup := k.aeads[key.ID]; dup {
			return nil, fmt.Errorf("seal: key id %q given twice", key.ID)
		}
		if len(key.Secret) < MinSecretLen {
			return nil, fmt.Errorf("seal: key %q: the secret must be at least %d bytes", key.ID, MinSecretLen)
		}
		aesKey, err := hkdf.Key(sha256.New, key.Secret, nil, "herald personal data v1", 32)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", key.ID, err)
		}
		block, err := aes.NewCipher(aesKey)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", key.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", key.ID, err)
		}
		k.aeads[key.ID] = aead
	}
	return k, nil
}

// ValidKeyID reports whether id may name a key: 1 to 16 of a-z, 0-9, '-'
// and '_'.
func ValidKeyID(id string) bool {
	if id == "" || len(id) > 16 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Current is the id of the key that seals ("" for a nil ring).
func (k *Keyring) Current() string {
	if k == nil {
		return ""
	}
	return k.current
}

// Sealed reports whether s is a sealed string.
func Sealed(s string) bool { return strings.HasPrefix(s, Prefix) }

// KeyID is the id of the key s was sealed with, or "" for a plain s.
func KeyID(s string) string {
	if !Sealed(s) {
		return ""
	}
	rest := s[len(Prefix):]
	id, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return id
}

func aad(purpose, tenant string) []byte {
	return []byte("herald/" + purpose + "/" + tenant)
}

// Seal returns plain sealed with the current key for purpose and tenant.
// A nil ring, or an empty plain, returns plain unchanged.
func (k *Keyring) Seal(purpose, tenant, plain string) string {
	if k == nil || plain == "" {
		return plain
	}
	aead := k.aeads[k.current]
	buf := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(buf); err != nil {
		panic("seal: crypto/rand: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	buf = aead.Seal(buf, buf, []byte(plain), aad(purpose, tenant))
	return Prefix + k.current + ":" + base64.RawURLEncoding.EncodeToString(buf)
}

// Open returns the plain text of s, sealed for purpose and tenant; a plain
// s is returned as it is.
func (k *Keyring) Open(purpose, tenant, s string) (string, error) {
	if !Sealed(s) {
		return s, nil
	}
	if k == nil {
		return "", ErrNoKeys
	}
	id, enc, ok := strings.Cut(s[len(Prefix):], ":")
	if !ok {
		return "", ErrCorrupt
	}
	aead, ok := k.aeads[id]
	if !ok {
		return "", &unknownKeyError{id: id}
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", ErrCorrupt
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], aad(purpose, tenant))
	if err != nil {
		return "", ErrCorrupt
	}
	return string(plain), nil
}

// SealJSON seals params (a JSON object) into a JSON string for tenant. A
// nil ring, or empty params, returns raw unchanged.
func (k *Keyring) SealJSON(tenant string, raw json.RawMessage) json.RawMessage {
	if k == nil || len(raw) == 0 {
		return raw
	}
	s := k.Seal(Params, tenant, string(raw))
	// A sealed string (prefix, id, base64url) holds nothing JSON escapes.
	b := make([]byte, 0, len(s)+2)
	return append(append(append(b, '"'), s...), '"')
}

// OpenJSON returns the params SealJSON sealed; plain params (anything
// but a JSON string) are returned as they are.
func (k *Keyring) OpenJSON(tenant string, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return raw, nil
	}
	s, ok := quoted(raw)
	if !ok {
		var err error
		if err = json.Unmarshal(raw, &s); err != nil {
			return nil, ErrCorrupt
		}
	}
	if !Sealed(s) {
		return nil, ErrCorrupt // params are an object when plain
	}
	plain, err := k.Open(Params, tenant, s)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(plain), nil
}

// quoted is raw's string when raw is a JSON string without escapes (what
// SealJSON writes).
func quoted(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	return string(inner), true
}

// JSONKeyID is the id of the key a SealJSON value was sealed with, or ""
// for plain params.
func JSONKeyID(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return KeyID(s)
}

// SealMap seals each value of m in place for purpose and tenant.
func SealMap[K ~string](k *Keyring, purpose, tenant string, m map[K]string) {
	if k == nil {
		return
	}
	for key, v := range m {
		m[key] = k.Seal(purpose, tenant, v)
	}
}

// OpenMap opens each value of m in place; on an error m is left part
// opened and must not be used.
func OpenMap[K ~string](k *Keyring, purpose, tenant string, m map[K]string) error {
	for key, v := range m {
		plain, err := k.Open(purpose, tenant, v)
		if err != nil {
			return err
		}
		m[key] = plain
	}
	return nil
}

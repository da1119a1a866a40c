package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers a signed request carries.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a Standard Webhooks symmetric secret: whsec_ followed
// by the key in standard, padded base64.
const SecretPrefix = "whsec_"

// The key sizes the specification allows for a symmetric secret: at least
// 24 bytes, at most 64 (512 bits).
const (
	MinKeyLen = 24
	MaxKeyLen = 64
)

// ParseSecret decodes a "whsec_<base64>" secret to its raw key. White space
// around it (a secret file's final newline) is ignored. Its errors say what
// is wrong and never quote the secret.
func ParseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), SecretPrefix)
	if !ok {
		return nil, errors.New("webhook secret: does not start with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, errors.New("webhook secret: the part after " + SecretPrefix + " is not standard base64")
	}
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return key, nil
}

// checkKey holds a raw key to the sizes of MinKeyLen..MaxKeyLen.
func checkKey(key []byte) error {
	if len(key) < MinKeyLen || len(key) > MaxKeyLen {
		return fmt.Errorf("key is %d bytes, want %d to %d", len(key), MinKeyLen, MaxKeyLen)
	}
	return nil
}

// Sign returns the webhook-signature value for one request: for each key,
// in order, "v1," and the base64 HMAC-SHA256 of id + "." + the timestamp's
// Unix seconds + "." + body, separated by single spaces. body must be the
// exact bytes sent.
func Sign(keys [][]byte, id string, timestamp time.Time, body []byte) string {
	const sigLen = len("v1,") + 44 // base64 of a 32-byte MAC is 44 characters
	out := make([]byte, 0, len(keys)*(sigLen+1))
	var ts [20]byte
	sec := strconv.AppendInt(ts[:0], timestamp.Unix(), 10)
	var sum [sha256.Size]byte
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write(sec)
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, "v1,"...)
		out = base64.StdEncoding.AppendEncode(out, mac.Sum(sum[:0]))
	}
	return string(out)
}

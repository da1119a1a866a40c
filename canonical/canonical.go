// Package canonical turns a JSON document into one fixed byte form, so that
// two encodings of the same value (keys in another order, other white space,
// escapes instead of characters) hash alike. herald hashes request bodies for
// idempotency keys (intake) and event payloads for the idempotent consumer
// (consumer) this way.
//
// The canonical form is what encoding/json writes for the decoded value:
// object keys sorted, no insignificant white space, HTML characters not
// escaped, a trailing newline. Numbers are kept exactly as written ("1.0" and
// "1" stay different: the form never reinterprets a number). Strings are
// decoded and re-encoded, so invalid UTF-8 and lone surrogate escapes become
// U+FFFD; callers that must tell such inputs apart should hash the raw bytes
// instead (consumer.PayloadHash does). For an object with a repeated key the
// last value wins, as in encoding/json.
//
// The output is stable: stored hashes of it (idempotency keys) stay valid
// across releases, so any change to it is a breaking change.
package canonical

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// JSON returns the canonical form of raw, which must hold exactly one JSON
// value (white space around it allowed).
func JSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical: not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonical: not valid JSON: data after the first value")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // encoding/json sorts map keys
		return nil, fmt.Errorf("canonical: %w", err)
	}
	return b.Bytes(), nil
}

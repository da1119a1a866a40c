package validate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/heraldhq/herald/problem"
)

// Edge refuses, with 400 application/problem+json, a request whose path or
// query no store could hold (see the package doc), before next routes it:
// every path id of every route is checked here once.
func Edge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := checkURL(r.URL); p != nil {
			problem.Write(w, *p)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func checkURL(u *url.URL) *problem.Problem {
	bad := func(status int, param, format string, args ...any) *problem.Problem {
		return &problem.Problem{Status: status, Detail: fmt.Sprintf(format, args...), Param: param}
	}
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		param, status, max := segment(segs, i)
		s, err := url.PathUnescape(seg)
		switch {
		case err != nil:
			return bad(status, param, "the path is not validly escaped")
		case len(s) > max:
			return bad(status, param, "a path segment (%s) is longer than %d bytes", cmp.Or(param, "segment"), max)
		case !Printable(s):
			return bad(status, param, "the path (%s) must be printable UTF-8: no control characters, no NUL", cmp.Or(param, "segment"))
		case s == "." || s == ".." || (s == "" && i > 0 && i < len(segs)-1):
			// The mux would answer such a path with a redirect to its
			// cleaned form (…//cancel to …/cancel): another endpoint, and
			// no problem+json. An id left out is no endpoint.
			return bad(http.StatusNotFound, param, "no such endpoint: the path has an empty, . or .. segment")
		}
	}
	if len(u.RawQuery) > MaxQuery {
		return bad(http.StatusBadRequest, "", "the query is longer than %d bytes", MaxQuery)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad(http.StatusBadRequest, "", "the query is not validly escaped")
	}
	for k, vs := range q {
		if !Printable(k) {
			return bad(http.StatusBadRequest, "", "the query must be printable UTF-8: no control characters, no NUL")
		}
		for _, v := range vs {
			if !Printable(v) {
				return bad(http.StatusBadRequest, k, "the query must be printable UTF-8: no control characters, no NUL")
			}
		}
	}
	return nil
}

// segment names the path segment segs[i] (segs[0] is the empty string
// before the first "/") as its route's wildcard does, with the status and
// length limit a bad one gets: the recipient of /v1/recipients/{recipient}/…
// is a request field like the intake's (422, MaxRecipient); any other
// segment is a 400 over MaxSegment.
func segment(segs []string, i int) (param string, status, max int) {
	at := func(j int, s string) bool { return j < len(segs) && segs[j] == s }
	switch {
	case i == 3 && at(1, "v1") && at(2, "recipients"):
		return "recipient", http.StatusUnprocessableEntity, MaxRecipient
	case i == 5 && at(1, "v1") && at(2, "recipients") && at(4, "devices"):
		return "token", http.StatusBadRequest, MaxSegment
	case i == 3 && at(1, "v1") && at(2, "notifications"):
		return "id", http.StatusBadRequest, MaxSegment
	case i == 3 && at(1, "v1") && (at(2, "parked") || at(2, "deliveries")):
		return "message_id", http.StatusBadRequest, MaxSegment
	case i == 4 && at(1, "v1") && at(2, "me") && at(3, "items"):
		return "id", http.StatusBadRequest, MaxSegment
	}
	return "", http.StatusBadRequest, MaxSegment
}

// DecodeJSON is every JSON-body route's decode step: it reads r's body (at
// most max bytes, else 413), checks it with JSON (400), and decodes it
// strictly into v: no unknown field, exactly one JSON value with nothing
// after it but white space (400). An empty body is allowed when emptyOK,
// leaving v as it is. It answers the problem itself and returns false
// when the body is refused.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, max int64, emptyOK bool) bool {
	return readJSON(w, r, v, max, emptyOK) != nil
}

// ReadJSON is DecodeJSON (no empty body) for a handler that keeps the body
// as it came (a request hash): it returns the body, or nil when refused.
func ReadJSON(w http.ResponseWriter, r *http.Request, v any, max int64) []byte {
	return readJSON(w, r, v, max, false)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any, max int64, emptyOK bool) []byte {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			problem.New(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", max))
			return nil
		}
		problem.New(w, http.StatusBadRequest, "could not read the body")
		return nil
	}
	if emptyOK && len(bytes.TrimSpace(raw)) == 0 {
		return raw // io.ReadAll's slice is never nil
	}
	if err := Body(raw, v); err != nil {
		p := problem.Problem{Status: http.StatusBadRequest, Detail: err.Error()}
		var f interface{ Param() string }
		if errors.As(err, &f) {
			p.Param = f.Param()
		}
		problem.Write(w, p)
		return nil
	}
	return raw
}

// Body checks raw with JSON and decodes it strictly into v, as DecodeJSON
// does, for a handler that keeps the raw body (intake).
func Body(raw []byte, v any) error {
	if err := JSON(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, raw, v)
	}
	// Anything after the value but white space is refused. (dec.More alone
	// would let a stray closing '}' or ']' through.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("the body must hold exactly one JSON value, with nothing after it")
	}
	return timeOffsets(raw, v)
}

// timeOffsets refuses a time field of the struct v points to whose UTC
// offset RFC 3339 does not allow: time's decoder takes hours up to 24 and
// minutes up to 60 ("+24:00" is read as a day ahead of "+00:00"), so a
// send_at written with such an offset would be scheduled a day off rather
// than refused. Like timeField it reads the top-level fields alone. The
// body is read again only when v decoded one of them (a send_at, an
// expires_at), so a notification without one costs no second parse.
func timeOffsets(raw []byte, v any) error {
	if !anyTimeSet(v) {
		return nil
	}
	var bad error
	timeFields(raw, v, func(name string, value json.RawMessage) bool {
		var text string
		if string(value) == "null" || json.Unmarshal(value, &text) != nil || ValidOffset(text) {
			return true
		}
		bad = &FieldError{name, fmt.Sprintf(`%q is not a time (its UTC offset must be Z or from -23:59 to +23:59): a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`, text)}
		return false
	})
	return bad
}

// anyTimeSet reports whether a top-level time field of the struct v
// points to holds a time (a *time.Time not nil, a time.Time not zero).
func anyTimeSet(v any) bool {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return false
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return false
	}
	timeType := reflect.TypeFor[time.Time]()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch {
		case !f.CanInterface(): // unexported: JSON decodes nothing into it
		case f.Type() == timeType && !f.Interface().(time.Time).IsZero():
			return true
		case f.Type() == reflect.PointerTo(timeType) && !f.IsNil():
			return true
		}
	}
	return false
}

// timeFields calls each, until it returns false, with the name and the
// value in raw of each top-level field of the struct v points to that is
// a time (time.Time or *time.Time) and that raw holds.
func timeFields(raw []byte, v any, each func(name string, value json.RawMessage) bool) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return
	}
	timeType := reflect.TypeFor[time.Time]()
	for f := range t.Fields() {
		if f.Type != timeType && f.Type != reflect.PointerTo(timeType) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if value, ok := fields[name]; ok && !each(name, value) {
			return
		}
	}
}

// ValidOffset reports whether the time s ends in Z or in an offset ±hh:mm
// with hh at most 23 and mm at most 59, as RFC 3339 allows; time.Parse
// takes up to +24:60, which Time.MarshalJSON then refuses.
func ValidOffset(s string) bool {
	if strings.HasSuffix(s, "Z") {
		return true
	}
	if len(s) < 6 {
		return false
	}
	off := s[len(s)-6:]
	if (off[0] != '+' && off[0] != '-') || off[3] != ':' {
		return false
	}
	return off[1:3] <= "23" && off[4:6] <= "59"
}

// FieldError is a body's value that does not decode as its field's kind:
// the problem's param is Field.
type FieldError struct{ Field, Why string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Why }

// Param is the field, the problem's param.
func (e *FieldError) Param() string { return e.Field }

// unknownField is the decoder's refusal of a field the request does not
// have, in its own words, with that field as the problem's param.
type unknownField struct {
	error
	field string
}

func (e unknownField) Param() string { return e.field }

// decodeError says what the decoder refused, decoding raw into v, in a
// caller's words: the field and the kind of JSON value it takes, or the
// time format, never Go's type names. Anything else (bad syntax, an
// unknown field) keeps the decoder's own words.
func decodeError(err error, raw []byte, v any) error {
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		if why := wholeNumber(typ); why != "" {
			return &FieldError{typ.Field, why}
		}
		return &FieldError{typ.Field, wrongKind(typ)}
	case errors.As(err, &typ):
		return fmt.Errorf("the body must be %s, not %s", jsonKind(typ.Type), JSONValue(typ.Value))
	}
	if t := timeError(err); t != "" {
		if f := timeField(raw, v); f != "" {
			return &FieldError{f, t}
		}
		return errors.New(t)
	}
	if rest, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		if field, ok := strings.CutSuffix(rest, `"`); ok {
			// Valid JSON with a field this request does not take (a typo).
			return unknownField{fmt.Errorf("the body has a field this request does not take: %q", field), field}
		}
	}
	return fmt.Errorf("the body is not valid JSON for this request: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// ValueError says, in decodeError's words, that a part of a body decoded
// on its own (the value at path) has the wrong kind: "consent.sms: got a
// number where true or false belongs". "" when err is not such an error.
func ValueError(err error, path string) string {
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) {
		return ""
	}
	if typ.Field != "" {
		path += "." + typ.Field
	}
	return path + ": " + wrongKind(typ)
}

// wrongKind is a type error in a caller's words: "got a number where true
// or false belongs".
func wrongKind(typ *json.UnmarshalTypeError) string {
	return fmt.Sprintf("got %s where %s belongs", JSONValue(typ.Value), jsonKind(typ.Type))
}

// timeError is err in a caller's words if it is a time's decoding error
// (time.Time's UnmarshalJSON, or a parse in its layout), else "".
func timeError(err error) string {
	const format = `a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`
	var tm *time.ParseError
	switch {
	case errors.As(err, &tm) && tm.Message != "": // the layout's form, a value out of range
		return fmt.Sprintf("%q is not a time (%s): %s", tm.Value, strings.TrimPrefix(tm.Message, ": "), format)
	case errors.As(err, &tm):
		return fmt.Sprintf("%q is not a time: %s", tm.Value, format)
	case strings.HasPrefix(err.Error(), "Time.UnmarshalJSON"): // a number or a boolean for a time
		return format
	}
	return ""
}

// timeField names the first field of the struct v points to that is a
// time (time.Time or *time.Time) whose value in raw does not decode as
// one: encoding/json names the field of a type error but not of an error
// from time's own decoder. "" when there is none (a time nested deeper).
func timeField(raw []byte, v any) string {
	found := ""
	timeFields(raw, v, func(name string, value json.RawMessage) bool {
		var tm time.Time
		if string(value) != "null" && tm.UnmarshalJSON(value) != nil {
			found = name
			return false
		}
		return true
	})
	return found
}

// OneHeader is the value of request header name ("" when absent), or an
// error when the request sent it more than once with different values: a
// request with two Idempotency-Keys cannot say which one it meant. The
// same value repeated (a client's retry layer adding it again) is that
// value.
func OneHeader(r *http.Request, name string) (string, error) {
	vs := r.Header.Values(name)
	if len(vs) == 0 {
		return "", nil
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return "", fmt.Errorf("send one %s header, not %d", name, len(vs))
		}
	}
	return vs[0], nil
}

// wholeNumber says why a whole-number field refused a number, where "got
// a number where a whole number belongs" would puzzle: one out of the
// field's range (in digits or not: 1e30), or one whose value is whole and
// in range but written with a decimal point or an exponent (2.0, 1e3).
// "" for anything else (1.5, a string). The value is read exactly
// (big.Rat), not through a float, so 1.0000000000000000001 is not whole.
func wholeNumber(typ *json.UnmarshalTypeError) string {
	n, ok := strings.CutPrefix(typ.Value, "number ")
	if !ok || jsonKind(typ.Type) != "a whole number" {
		return ""
	}
	r, ok := new(big.Rat).SetString(n)
	if !ok || !r.IsInt() {
		return ""
	}
	lo, hi := intRange(typ.Type)
	if r.Num().Cmp(lo) < 0 || r.Num().Cmp(hi) > 0 {
		return fmt.Sprintf("%s is out of range: a whole number from %s to %s belongs here", n, lo, hi)
	}
	return n + " is a whole number, but it must be written in digits alone (no decimal point or exponent)"
}

// intRange is the least and the greatest value of the integer type t (or
// of what t points to).
func intRange(t reflect.Type) (lo, hi *big.Int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bits := uint(t.Bits())
	one := big.NewInt(1)
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr {
		return new(big.Int), new(big.Int).Sub(new(big.Int).Lsh(one, bits), one)
	}
	hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits-1), one)
	return new(big.Int).Neg(new(big.Int).Add(hi, one)), hi
}

// JSONValue names, in a caller's words, the JSON value a decoder found
// (json.UnmarshalTypeError's Value: "string", "number 1.5"…).
func JSONValue(v string) string {
	kind, rest, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		kind = "an " + kind
	case "bool":
		kind = "true or false"
	default:
		kind = "a " + kind
	}
	if rest != "" {
		return kind + " (" + rest + ")"
	}
	return kind
}

// jsonKind names the JSON value a Go type takes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// Package problem writes RFC 9457 application/problem+json errors.
package problem

import (
	"encoding/json"
	"net/http"
)

// Problem is an error answer.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Param names the offending field or template param, when there is one.
	Param string `json:"param,omitempty"`
	// MissingParams, an extension member of the 422 for a request that lacks
	// params its kind's templates read, names every one of them (sorted), so
	// one answer says all a caller must add.
	MissingParams []string `json:"missing_params,omitempty"`
}

// Write sends p.
func Write(w http.ResponseWriter, p Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	// A detail is read by people: "Bearer <key>", not "Bearer \u003ckey\u003e".
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
}

// New writes a problem of the given status with a detail message.
func New(w http.ResponseWriter, status int, detail string) {
	Write(w, Problem{Status: status, Detail: detail})
}

// Unavailable writes 503 with Retry-After: 1 and detail: what herald
// answers for a store (or a broker) that did not answer, or a load that
// will pass; the client retries the same request.
func Unavailable(w http.ResponseWriter, detail string) {
	w.Header().Set("Retry-After", "1")
	New(w, http.StatusServiceUnavailable, detail)
}

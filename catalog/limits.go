package catalog

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// The caps on what one request may make herald hold or render (issue 13
// item 2; config limits). Intake's 64 KiB body bounds the params' bytes;
// these bound their shape, and what the templates make of them: a
// template that ranges over a list inside a range over it turns a 64 KiB
// body into gigabytes. Validate checks the shape (422, param "params") and
// every render stops at RenderedMax bytes, at intake (422) and at send
// time (a RenderError, which parks the message).
var (
	paramsMax   atomic.Int64
	depthMax    atomic.Int64
	renderedMax atomic.Int64
)

// MaxParamsBytes bounds one notification's params as JSON: intake's 64 KiB
// limit on a request's body bounds them over POST /v1/notifications, and
// the Go API and campaigns (a campaign's params, and each recipient's
// merged over them) check it themselves.
const MaxParamsBytes = 64 << 10

// Default caps (config limits' defaults).
const (
	DefaultParamsMax   = 1000
	DefaultDepthMax    = 8
	DefaultRenderedMax = 64 << 10
)

func init() { SetLimits(DefaultParamsMax, DefaultDepthMax, DefaultRenderedMax) }

// SetLimits sets the caps for the process (app does, from config limits);
// a value below 1 keeps the one set before.
func SetLimits(params, depth, rendered int) {
	for _, s := range []struct {
		v *atomic.Int64
		n int
	}{{&paramsMax, params}, {&depthMax, depth}, {&renderedMax, rendered}} {
		if s.n >= 1 {
			s.v.Store(int64(s.n))
		}
	}
}

// Limits are one catalog's caps, for a process whose caps are not the
// server's: herald.Client checks an intent against the server's config
// where it runs in the application's process. A field below 1 is the
// process's cap (SetLimits).
type Limits struct {
	ParamsMax, DepthMax, RenderedMax int
}

// Limit gives the catalog caps of its own, for Validate and for every
// render of its kinds.
func (c *Catalog) Limit(l Limits) {
	c.limits = l
	for _, k := range c.kinds {
		k.renderedMax = max(l.RenderedMax, 0)
	}
}

// capOf is own where it is a cap, else the process's.
func capOf(own int, process *atomic.Int64) int64 {
	if own >= 1 {
		return int64(own)
	}
	return process.Load()
}

// ErrRenderedTooLong is a render that passed the cap.
var ErrRenderedTooLong = errors.New("the rendered text is longer than the limit")

// checkShape is the params' count and depth check.
func checkShape(params map[string]any, l Limits) *FieldError {
	paramsCap, depthCap := capOf(l.ParamsMax, &paramsMax), capOf(l.DepthMax, &depthMax)
	count, deepest := 0, 0
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		deepest = max(deepest, depth)
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				count++
				walk(e, depth+1)
			}
		case []any:
			for _, e := range v {
				count++
				walk(e, depth+1)
			}
		}
	}
	walk(params, 0)
	switch {
	case int64(count) > paramsCap:
		return &FieldError{Param: "params", Detail: fmt.Sprintf("params hold %d values; at most %d are accepted", count, paramsCap)}
	case int64(deepest) > depthCap:
		return &FieldError{Param: "params", Detail: fmt.Sprintf("params nest %d deep; at most %d is accepted", deepest, depthCap)}
	}
	return nil
}

// capped is a render's buffer that refuses to grow past the cap.
type capped struct {
	b   []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if len(c.b)+len(p) > c.max {
		return 0, ErrRenderedTooLong
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

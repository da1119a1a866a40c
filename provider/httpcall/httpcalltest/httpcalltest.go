// Package httpcalltest helps the tests of adapters that send through
// package httpcall to end a call at the step they choose.
package httpcalltest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"
)

// Deadline is a context whose deadline passes when the test says so: Done
// closes and Err is context.DeadlineExceeded, as when a deadline passes,
// but at a step of the call the test chooses (from an httptrace hook, or
// once a fake server holds the request), not after a wall-clock time a
// loaded machine may overrun.
type Deadline struct {
	context.Context
	once sync.Once
	done chan struct{}
}

// NewDeadline returns a Deadline that has not passed.
func NewDeadline() *Deadline {
	return &Deadline{Context: context.Background(), done: make(chan struct{})}
}

// Hook makes the calls made with d run trace's hooks too, after those of
// the adapter's own trace (httptrace composes newest first). Call it
// before d is used.
func (d *Deadline) Hook(trace *httptrace.ClientTrace) {
	d.Context = httptrace.WithClientTrace(context.Background(), trace)
}

// ExpireAfterHeaders makes the deadline pass once a call's headers are
// written (httptrace.WroteHeaders; over HTTP/2 the HEADERS frame has been
// flushed) and holds net/http's writer there, before it can report the
// request written, until release is called. Over HTTP/2 RoundTrip returns
// on the deadline without waiting for its writer, so a test sees the call
// end at exactly that step. Over HTTP/1 RoundTrip waits for its writer:
// the hold then ends by itself after 30 seconds. Call it before d is used,
// instead of Hook.
func (d *Deadline) ExpireAfterHeaders() (release func()) {
	held := make(chan struct{})
	var once sync.Once
	d.Hook(&httptrace.ClientTrace{WroteHeaders: func() {
		d.Expire()
		select {
		case <-held:
		case <-time.After(30 * time.Second):
		}
	}})
	return func() { once.Do(func() { close(held) }) }
}

// Expire passes the deadline; calling it again does nothing.
func (d *Deadline) Expire() { d.once.Do(func() { close(d.done) }) }

// Done is closed once the deadline has passed.
func (d *Deadline) Done() <-chan struct{} { return d.done }

// Err is context.DeadlineExceeded once the deadline has passed, else nil.
func (d *Deadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// ClosedAddr is a 127.0.0.1 address where nothing listens: the port of a
// listener it has just closed, so a dial to it is refused. A listener
// opened meanwhile in the same process may be handed that port again; a
// test that must not race one runs alone.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// Hang holds a fake server's handler until release is closed (nil: never)
// or the client gives up on the request, and then answers nothing: it
// aborts the connection. Returning instead would make net/http write an
// empty 200, which a client whose deadline fired while it was closing the
// connection can still read, and a test of a timeout would see an answer.
func Hang(r *http.Request, release <-chan struct{}) {
	select {
	case <-release:
	case <-r.Context().Done():
		panic(http.ErrAbortHandler)
	}
}

package apns

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// pool holds the HTTP/2 connections to one APNs host and gives each call a
// stream reserved on one of them.
//
// net/http's own pool was measured against a fake with 250 streams a
// connection: 1,000 calls started at once dialled 883 connections, since
// every call that finds the pool full dials one (MaxConnsPerHost does not
// hold for HTTP/2). APNs cuts a connection's stream limit to 1 after a
// rejected notification (openradar 27870881), which would do the same in
// steady state. This pool dials one connection at a time, only while calls
// wait and fewer than maxConns exist, and hands freed streams to waiting
// calls first come, first served.
//
// A new connection's stream limit is not known until the server's SETTINGS
// frame is read (net/http assumes 100 until then), and APNs may raise it
// once a call was authenticated. So a new connection carries one call
// until its limit is known, and no other connection is dialled until the
// newest has answered a call (or is provenAfter old): a new connection may
// turn out to hold every waiting call.
type pool struct {
	tr          *http.Transport
	addr        string // host:port
	maxConns    int
	dialTimeout time.Duration
	provenAfter time.Duration

	mu      sync.Mutex
	conns   []*conn // oldest first: calls fill old connections, new ones idle out
	dialing bool
	queue   []*waiter
	closed  bool

	waiting atomic.Int32 // len(queue), read by the state hooks without mu
	kicked  atomic.Bool  // a grant pass is due
}

// errPoolClosed ends calls made after Close.
var errPoolClosed = errors.New("apns: provider closed")

// initialStreams is the stream limit net/http assumes for a connection
// until the server's SETTINGS frame says otherwise.
const initialStreams = 100

// provenAfter is how long a new connection that has answered no call yet
// holds up the dialling of another.
const provenAfter = time.Second

// conn is one HTTP/2 connection of the pool.
type conn struct {
	cc *http.ClientConn
	// proven: a call on it was answered (so the server's SETTINGS were
	// read before), or it is the pool's provenAfter old.
	proven atomic.Bool
}

// limitKnown reports whether the connection's stream limit is the
// server's: it was proven, or its limit is no longer net/http's guess.
func (c *conn) limitKnown() bool {
	return c.proven.Load() || c.cc.Available()+c.cc.InFlight() != initialStreams
}

// waiter is a call waiting for a stream.
type waiter struct {
	got chan grant // buffered 1: a grant is never blocked on its waiter
}

type grant struct {
	c   *conn
	err error
}

// acquire returns a connection with a stream reserved for one RoundTrip,
// or an error with nothing sent: ctx ended first, or the connection that
// was dialled for the call failed. The caller tells answered when the
// call got a response.
func (p *pool) acquire(ctx context.Context) (*conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	if len(p.queue) == 0 {
		if c := p.reserveLocked(); c != nil {
			p.mu.Unlock()
			return c, nil
		}
	}
	w := &waiter{got: make(chan grant, 1)}
	p.queue = append(p.queue, w)
	p.waiting.Store(int32(len(p.queue)))
	p.dialIfNeededLocked()
	p.mu.Unlock()

	select {
	case g := <-w.got:
		return g.c, g.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.queue {
		if q == w {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			p.waiting.Store(int32(len(p.queue)))
			return nil, ctx.Err()
		}
	}
	// Granted while ctx ended: give the stream back.
	if g := <-w.got; g.c != nil {
		g.c.cc.Release()
	}
	return nil, ctx.Err()
}

// reserveLocked reserves a stream on the oldest connection that has one,
// dropping connections that are closed or will take no more calls (a
// GOAWAY, an idle timeout). A connection whose limit is not known yet
// carries one call at a time.
func (p *pool) reserveLocked() *conn {
	live := p.conns[:0]
	var found *conn
	for _, c := range p.conns {
		if c.cc.Err() != nil || (c.cc.Available() == 0 && c.cc.InFlight() == 0) {
			c.cc.Close()
			continue
		}
		live = append(live, c)
		if found == nil && (c.limitKnown() || c.cc.InFlight() == 0) && c.cc.Reserve() == nil {
			found = c
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	return found
}

// grantLocked hands reserved streams to waiting calls, oldest first, and
// dials when calls are still waiting.
func (p *pool) grantLocked() {
	for len(p.queue) > 0 {
		c := p.reserveLocked()
		if c == nil {
			break
		}
		p.queue[0].got <- grant{c: c}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	p.waiting.Store(int32(len(p.queue)))
	p.dialIfNeededLocked()
}

func (p *pool) dialIfNeededLocked() {
	if p.dialing || p.closed || len(p.queue) == 0 || len(p.conns) >= p.maxConns {
		return
	}
	if n := len(p.conns); n > 0 && !p.conns[n-1].proven.Load() {
		return // the newest connection may yet take every waiting call
	}
	p.dialing = true
	go p.dial()
}

// answered is told that a call on c got a response.
func (p *pool) answered(c *conn) {
	if !c.proven.Swap(true) {
		p.kick()
	}
}

// dial opens one connection. It is not bound to any one call's context:
// the connection serves every call. A failed dial fails the calls waiting
// then (nothing of theirs was sent), so they end at once with the reason
// (refused, DNS, TLS) rather than at their timeout.
func (p *pool) dial() {
	ctx, cancel := context.WithTimeout(context.Background(), p.dialTimeout)
	defer cancel()
	cc, err := p.tr.NewClientConn(ctx, "https", p.addr)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.dialing = false
	if err != nil {
		for _, w := range p.queue {
			w.got <- grant{err: err}
		}
		p.queue = nil
		p.waiting.Store(0)
		return
	}
	if p.closed {
		cc.Close()
		return
	}
	c := &conn{cc: cc}
	cc.SetStateHook(func(*http.ClientConn) { p.kick() })
	time.AfterFunc(p.provenAfter, func() { p.answered(c) })
	p.conns = append(p.conns, c)
	p.grantLocked()
}

// kick is every connection's state hook (a stream ended, the server raised
// its stream limit, the connection closed). It may run inside a call that
// holds p.mu (Reserve), so it never takes p.mu itself: it starts a grant
// pass, unless no call waits or a pass is already due.
func (p *pool) kick() {
	if p.waiting.Load() == 0 || p.kicked.Swap(true) {
		return
	}
	go func() {
		// Cleared before the pass takes the lock: a kick from now on
		// starts another pass, so no freed stream goes unseen.
		p.kicked.Store(false)
		p.mu.Lock()
		p.grantLocked()
		p.mu.Unlock()
	}()
}

// close closes every connection; calls in flight end with an error.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.cc.Close()
	}
	p.conns = nil
	for _, w := range p.queue {
		w.got <- grant{err: errPoolClosed}
	}
	p.queue = nil
	p.waiting.Store(0)
}

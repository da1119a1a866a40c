package rabbitmq

import (
	"net"
	"sync"
)

// coalesceMax is how much a held connection gathers before it writes
// anyway: a batch of the relay's 500 messages is about 350 KB, so a held
// batch goes out in two or three writes, and memory stays bounded however
// long a hold lasts. A variable for one test, which lifts it.
var coalesceMax = 128 << 10

// coalescer is the socket under a herald connection (under TLS too, with
// amqps: it then gathers the records). The library flushes its buffer once
// per frame set, so a publish is one write(2) and, on the broker's side,
// one read: for the relay's batches that write was half of the client's
// CPU a message (a variant of BenchmarkBrokerCeiling: 18 µs a message
// written one by one, 10 µs held) and cost 15% of the throughput. While a
// publisher holds it (hold … release, around a batch), writes gather in
// memory and go out together at the release, or sooner past coalesceMax;
// unheld it writes through. Holds nest (several relays share a publisher);
// each release writes out everything gathered, so nothing waits longer
// than the batch that is being published beside it.
//
// A gathered write is reported written before it is: if the socket then
// fails, the error comes back from the next write and the connection is
// closed, so the library's reader fails too and the channel's unconfirmed
// publishes settle as ErrConnectionLost (the relay offers them again; the
// deliveries claim stops a second send). Nothing that waits for the broker
// may wait while holding (the heartbeats would wait too): confirmer.publish
// lets go of its hold while it waits for a free slot.
type coalescer struct {
	net.Conn

	mu    sync.Mutex
	holds int
	buf   []byte
	err   error // the first failed write; every later write returns it
	// writes counts the socket writes made, for the tests' reading of
	// how a batch went out.
	writes int
}

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.holds == 0 { // nothing is gathered unheld: each release drains
		return c.write(p)
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= coalesceMax {
		if err := c.drain(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// hold starts gathering writes; each hold is ended by one release. A nil
// coalescer (a connection dialled without one) does nothing.
func (c *coalescer) hold() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// release ends a hold and writes out what was gathered.
func (c *coalescer) release() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds--
	_ = c.drain() // a failure is kept in c.err for the library's next write
}

// written is how many socket writes c has made.
func (c *coalescer) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// drain writes out what was gathered.
func (c *coalescer) drain() error {
	if len(c.buf) == 0 || c.err != nil {
		return c.err
	}
	_, err := c.write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// write sends p through, or records why it could not and closes the
// socket, so the reader side fails as well.
func (c *coalescer) write(p []byte) (int, error) {
	c.writes++
	n, err := c.Conn.Write(p)
	if err != nil {
		c.err = err
		c.buf = nil
		_ = c.Conn.Close()
	}
	return n, err
}

package testenv

import (
	"bytes"
	"sync"
)

// Buffer collects output written from several goroutines at once (a
// child process's pipes, a logger's handlers) and reads it back whole or
// from a mark on.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Mark is the position of the end of the output so far, for Since.
func (l *Buffer) Mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Since returns the output written after mark.
func (l *Buffer) Since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b.Bytes()[mark:])
}

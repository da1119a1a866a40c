package ratelimit

// Queued is how many callers wait for provider's tokens in this process.
func (l *Limiter) Queued(provider string) int {
	b := l.buckets[provider]
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

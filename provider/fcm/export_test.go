package fcm

// SetTokenHooks installs the token source's test signals: wait runs when a
// call starts waiting on a token refresh, refreshed when a refresh ends.
func SetTokenHooks(f *FCM, wait, refreshed func()) {
	f.tokens.mu.Lock()
	defer f.tokens.mu.Unlock()
	f.tokens.onWait, f.tokens.onRefreshed = wait, refreshed
}

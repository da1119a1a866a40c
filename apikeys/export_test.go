package apikeys

// HoldKDF takes every KDF slot of v until release: a check then waits for
// one until its timeout (ErrBusy).
func (v *Verifier) HoldKDF() (release func()) {
	for range cap(v.kdf) {
		v.kdf <- struct{}{}
	}
	return func() {
		for range cap(v.kdf) {
			<-v.kdf
		}
	}
}

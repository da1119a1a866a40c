package apikeys_test

import (
	"testing"

	"github.com/heraldhq/herald/apikeys"
)

// BenchmarkVerify is the per-request cost of a key: a config key (a map
// look-up by digest) against a stored key once cached (a digest, the
// cache, the recheck clock), and the KDF a stored key costs once.
func BenchmarkVerify(b *testing.B) {
	bd := setup(b)
	_, key := bd.create(b, apikeys.CreateParams{})
	b.Run("ConfigKey", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := bd.v.Verify(bd.ctx, "dev-key"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("StoredKeyCached", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := bd.v.Verify(bd.ctx, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("KDFAtProductionRounds", func(b *testing.B) {
		hash, err := apikeys.Hash("secret", 600_000)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			apikeys.Check(hash, "secret")
		}
	})
}

package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
)

// TestRefusalOfAnOldTokenKeepsTheCurrentOne: a refusal that arrives for a
// token already replaced (a slow call) does not throw away its successor.
func TestRefusalOfAnOldTokenKeepsTheCurrentOne(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := &tokenSource{key: key, keyID: "ABC123DEFG", teamID: "TEAM456XYZ", clock: clk}
	old, _ := s.get()
	clk.Advance(TokenRotateAfter)
	current, _ := s.get()
	if current == old {
		t.Fatal("not rotated at TokenRotateAfter")
	}
	clk.Advance(5 * time.Minute) // the current token is past the forced-rotation gap
	s.refused(old)
	if got, _ := s.get(); got != current {
		t.Fatal("a refusal of the replaced token threw away the current one")
	}
	s.refused(current)
	if got, _ := s.get(); got == current {
		t.Fatal("a refusal of the current token did not replace it")
	}
}

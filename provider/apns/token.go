package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/clock"
)

// Apple's rules for a provider token: it is refused once its iat is more
// than an hour old, and a provider that signs new ones more often than
// every 20 minutes is answered 429 TooManyProviderTokenUpdates. One token
// is shared by every call and signed again when it is TokenRotateAfter old.
const (
	// TokenRotateAfter is the age at which the token is signed again:
	// inside Apple's hour, with ten minutes for clock skew and slow calls.
	TokenRotateAfter = 50 * time.Minute
	// tokenForcedRotateGap is how old the token must be before an answer
	// that refuses it (ExpiredProviderToken, InvalidProviderToken) has it
	// signed again. A token refused in its first minute is refused for a
	// reason a new signature does not cure (a wrong key id or team, a
	// clock an hour off), and signing on every refusal would sign on
	// every call.
	tokenForcedRotateGap = time.Minute
	// tokenClockBackTolerance: a token whose iat lies further ahead of
	// this process's clock than this (the clock was stepped back) is
	// signed again rather than kept for another 50 minutes.
	tokenClockBackTolerance = time.Minute
)

// tokenSource signs the provider token and keeps it until it must change.
type tokenSource struct {
	key    *ecdsa.PrivateKey
	keyID  string
	teamID string
	clock  clock.Clock

	mu     sync.Mutex
	token  string
	issued time.Time // the iat of token, on clock
}

// parseKey reads a .p8 file's contents: a PEM "PRIVATE KEY" block holding
// a PKCS#8 EC P-256 key (a SEC 1 "EC PRIVATE KEY" block is taken too). Its
// errors say what was wrong in words of their own, never with the input.
func parseKey(p8 []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(p8)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	var parsed any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		parsed, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, errors.New("not a PEM PRIVATE KEY block")
	}
	if err != nil {
		return nil, errors.New("not a PKCS#8 private key")
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an EC private key")
	}
	if key.Curve != elliptic.P256() {
		return nil, errors.New("not a P-256 key")
	}
	return key, nil
}

// get returns the current token, signing a new one when there is none,
// when it is TokenRotateAfter old, or when the clock went back past its iat.
func (s *tokenSource) get() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	age := now.Sub(s.issued)
	if s.token != "" && age < TokenRotateAfter && age > -tokenClockBackTolerance {
		return s.token, nil
	}
	return s.signLocked(now)
}

// refused is told that APNs refused token as expired or invalid: the next
// get signs a new one, unless token is no longer the current one (another
// call's refusal already replaced it: one refusal of many concurrent calls
// rotates once) or it is younger than tokenForcedRotateGap.
func (s *tokenSource) refused(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token != s.token {
		return
	}
	age := s.clock.Now().Sub(s.issued)
	if age >= tokenForcedRotateGap || age < 0 {
		s.token = ""
	}
}

func (s *tokenSource) signLocked(now time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": s.teamID,
		"iat": now.Unix(),
	})
	t.Header["kid"] = s.keyID
	signed, err := t.SignedString(s.key)
	if err != nil {
		return "", errors.New("sign provider token")
	}
	s.token, s.issued = signed, now
	return signed, nil
}

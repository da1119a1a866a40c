package webhook_test

// These tests hold the signing to the Standard Webhooks specification: its
// libraries' published vector, the headers of a real request as an
// httptest server receives it, rotation with two secrets, and secrets kept
// out of every error and outcome.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
	"github.com/heraldhq/herald/provider/webhook"
)

// The vector of the specification's Go library (standard-webhooks/
// standard-webhooks, libraries/go/webhook_test.go, TestWebhookSign); the
// other libraries test the same one.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// Two secrets of a rotation: newSecret signs now, oldSecret during the grace period.
var (
	newSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("herald-test-new-key-0123456789ab"))
	oldSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("herald-test-old-key-0123456789ab"))
)

// fixedNow is the clock of signed test calls.
var fixedNow = time.Date(2026, 12, 1, 9, 30, 15, 500_000_000, time.UTC)

func mustParse(t *testing.T, s string) []byte {
	t.Helper()
	key, err := webhook.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return key
}

func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key := mustParse(t, vectorSecret)
	got := webhook.Sign([][]byte{key}, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("Sign = %q, want the specification's %q", got, vectorSignature)
	}
	// The sub-second part of the clock is not signed: the header carries seconds.
	if got := webhook.Sign([][]byte{key}, vectorID, time.Unix(vectorTimestamp, 999_999_999), []byte(vectorBody)); got != vectorSignature {
		t.Fatalf("Sign at .999999999 = %q, want %q", got, vectorSignature)
	}
}

func TestSignWithTwoKeysGivesBothSignaturesInOrder(t *testing.T) {
	t.Parallel()
	vector, other := mustParse(t, vectorSecret), mustParse(t, newSecret)
	ts, body := time.Unix(vectorTimestamp, 0), []byte(vectorBody)
	got := webhook.Sign([][]byte{other, vector}, vectorID, ts, body)
	want := webhook.Sign([][]byte{other}, vectorID, ts, body) + " " + vectorSignature
	if got != want {
		t.Fatalf("Sign(two keys) = %q, want %q", got, want)
	}
	if webhook.Sign(nil, vectorID, ts, body) != "" {
		t.Fatal("Sign with no key is not empty")
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString
	key24, key64 := strings.Repeat("k", 24), strings.Repeat("k", 64)
	good := []struct{ name, secret, key string }{
		{"TwentyFourBytes", "whsec_" + b64([]byte(key24)), key24},
		{"SixtyFourBytes", "whsec_" + b64([]byte(key64)), key64},
		{"SurroundingWhiteSpaceIgnored", " whsec_" + b64([]byte(key24)) + "\n", key24},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := string(mustParse(t, c.secret)); got != c.key {
				t.Fatalf("key = %q, want %q", got, c.key)
			}
		})
	}
	bad := []struct{ name, secret, want string }{
		{"NoPrefix", b64([]byte(key24)), "does not start with whsec_"},
		{"OtherPrefix", "whsk_" + b64([]byte(key24)), "does not start with whsec_"},
		{"NotBase64", "whsec_" + key24 + "!!", "not standard base64"},
		{"URLSafeBase64", "whsec_" + base64.URLEncoding.EncodeToString([]byte("\xfb\xff"+key24)), "not standard base64"},
		{"MissingPadding", "whsec_" + base64.RawStdEncoding.EncodeToString([]byte(key24+"x")), "not standard base64"},
		{"TooShort", "whsec_" + b64([]byte(key24[1:])), "key is 23 bytes, want 24 to 64"},
		{"TooLong", "whsec_" + b64([]byte(key64+"k")), "key is 65 bytes, want 24 to 64"},
		{"Empty", "whsec_", "key is 0 bytes"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			key, err := webhook.ParseSecret(c.secret)
			if err == nil {
				t.Fatalf("ParseSecret accepted it (key %d bytes)", len(key))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to say %q", err, c.want)
			}
			assertNoSecret(t, err.Error(), c.secret)
		})
	}
}

// assertNoSecret fails if s holds the secret, its base64 part or its key
// (text written by a failing call of the adapter or ParseSecret).
func assertNoSecret(t *testing.T, s string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		b64 := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(secret), "whsec_"))
		needles := []string{secret, b64}
		if key, err := base64.StdEncoding.DecodeString(b64); err == nil && len(key) >= 8 {
			needles = append(needles, string(key))
		}
		if len(b64) >= 8 {
			needles = append(needles, b64[:8]) // a quoted prefix leaks too
		}
		for _, n := range needles {
			if n != "" && strings.Contains(s, n) {
				t.Fatalf("%q contains the secret (%q)", s, n)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := webhook.Config{Secrets: [][]byte{mustParse(t, newSecret), mustParse(t, oldSecret)}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(two good keys) = %v", err)
	}
	if err := (webhook.Config{}).Validate(); err != nil {
		t.Fatalf("Validate(no keys) = %v", err)
	}
	short := []byte("short-secret-key")
	err := webhook.Config{Secrets: [][]byte{mustParse(t, newSecret), short}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "secrets[1]: key is 16 bytes") {
		t.Fatalf("Validate(short second key) = %v, want secrets[1] named", err)
	}
	assertNoSecret(t, err.Error(), newSecret)
	if strings.Contains(err.Error(), string(short)) {
		t.Fatalf("%q contains the key", err)
	}
}

// acceptingServer answers every request 202 after recording it in rec.
func acceptingServer(t *testing.T, rec *recorder) *httptest.Server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		w.WriteHeader(http.StatusAccepted)
	})
}

// sendSigned makes one call through a fresh adapter signing with secrets at fixedNow.
func sendSigned(t *testing.T, rawURL string, m provider.Message, secrets ...string) provider.Outcome {
	t.Helper()
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = mustParse(t, s)
	}
	w := webhook.New(webhook.Config{URL: rawURL, Timeout: callTimeout, Secrets: keys, Now: func() time.Time { return fixedNow }})
	return w.Send(context.Background(), m)
}

// TestSignedRequest checks a signed request as the receiver gets it: the
// contract of DESIGN §8 as before, plus the three Standard Webhooks headers,
// each once, the signature made over the bytes that arrived.
func TestSignedRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secrets []string
	}{
		{"OneSecret", []string{newSecret}},
		{"RotationSignsWithBoth", []string{newSecret, oldSecret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := acceptingServer(t, &rec)
			m := message("msg-signed-" + tc.name)
			wantOutcome(t, sendSigned(t, ts.URL, m, tc.secrets...), provider.Accepted)
			h := rec.only(t)
			assertWireFormat(t, h, m)

			one := func(name string) string {
				t.Helper()
				v := h.header.Values(name)
				if len(v) != 1 {
					t.Fatalf("%s = %q, want exactly one value", name, v)
				}
				return v[0]
			}
			if got := one(webhook.HeaderID); got != m.MessageID {
				t.Errorf("webhook-id = %q, want %q", got, m.MessageID)
			}
			if got, want := one(webhook.HeaderTimestamp), strconv.FormatInt(fixedNow.Unix(), 10); got != want {
				t.Errorf("webhook-timestamp = %q, want %q (Config.Now)", got, want)
			}
			sigs := strings.Split(one(webhook.HeaderSignature), " ")
			if len(sigs) != len(tc.secrets) {
				t.Fatalf("webhook-signature has %d entries %q, want one per secret (%d)", len(sigs), sigs, len(tc.secrets))
			}
			for i, s := range tc.secrets {
				want := webhook.Sign([][]byte{mustParse(t, s)}, m.MessageID, fixedNow, h.body)
				if sigs[i] != want {
					t.Errorf("signature %d = %q, want %q over the body received", i, sigs[i], want)
				}
			}
		})
	}

	t.Run("UnsignedWithoutSecrets", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := acceptingServer(t, &rec)
		m := message("msg-unsigned")
		wantOutcome(t, send(t, ts.URL, 0, m), provider.Accepted)
		h := rec.only(t)
		assertWireFormat(t, h, m)
		for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
			if v := h.header.Values(name); v != nil {
				t.Errorf("%s = %q on an unsigned request", name, v)
			}
		}
	})

	// Each attempt is signed at its own time: the clock is read per call.
	t.Run("TimestampIsReadPerCall", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := acceptingServer(t, &rec)
		now := fixedNow
		w := webhook.New(webhook.Config{URL: ts.URL, Timeout: callTimeout, Secrets: [][]byte{mustParse(t, newSecret)},
			Now: func() time.Time { return now }})
		wantOutcome(t, w.Send(context.Background(), message("msg-clock")), provider.Accepted)
		now = now.Add(7 * time.Second)
		wantOutcome(t, w.Send(context.Background(), message("msg-clock")), provider.Accepted)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i, h := range rec.hits {
			if got, want := h.header.Get(webhook.HeaderTimestamp), strconv.FormatInt(fixedNow.Unix()+int64(7*i), 10); got != want {
				t.Errorf("call %d: webhook-timestamp = %q, want %q", i, got, want)
			}
		}
	})
}

// TestSigningKeepsTheClassification: a signed call is classified by the
// same table as an unsigned one.
func TestSigningKeepsTheClassification(t *testing.T) {
	for _, c := range []struct {
		code   int
		class  provider.Class
		reason string
	}{
		{http.StatusNoContent, provider.Accepted, ""},
		{http.StatusUnauthorized, provider.NotSent, "HTTP_401"},
		{http.StatusTooManyRequests, provider.NotSent, "HTTP_429"},
		{http.StatusGone, provider.Permanent, "HTTP_410"},
		{http.StatusServiceUnavailable, provider.Unknown, "HTTP_503"},
	} {
		t.Run(fmt.Sprintf("Status%d", c.code), func(t *testing.T) {
			t.Parallel()
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(c.code) })
			out := sendSigned(t, ts.URL, message(fmt.Sprintf("msg-signed-%d", c.code)), newSecret, oldSecret)
			if out.Class != c.class || out.Reason != c.reason || out.DeadDestination != (c.code == http.StatusGone) {
				t.Fatalf("outcome = %+v, want %v %q", out, c.class, c.reason)
			}
		})
	}
}

// TestSecretsNeverInOutcomes feeds a signing adapter a failure from every
// path it has (status, refused, DNS, TLS, timeout, bad URL) and checks no
// outcome reason holds a secret.
func TestSecretsNeverInOutcomes(t *testing.T) {
	statuses := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(code)
	})
	silent := holdingListener(t)
	// Not parallel, and no listener opened after this one closes, so its
	// port stays refused (as in TestConnectionRefusedIsNotSent).
	refused := "http://" + httpcalltest.ClosedAddr(t)
	urls := []string{refused, "http://nosuch.invalid/", "https://" + statuses.Listener.Addr().String(),
		"http://" + silent.Addr().String(), "http://[::1%zz]/", "::not a url"}
	for _, code := range []int{200, 301, 400, 401, 410, 429, 500} {
		urls = append(urls, fmt.Sprintf("%s/?code=%d", statuses.URL, code))
	}
	keys := [][]byte{mustParse(t, newSecret), mustParse(t, oldSecret)}
	for _, u := range urls {
		// A short Timeout: the silent listener's call must end on it.
		w := webhook.New(webhook.Config{URL: u, Timeout: 200 * time.Millisecond, Secrets: keys})
		out := w.Send(context.Background(), message("msg-leak"))
		t.Logf("%s → %+v", u, out)
		assertNoSecret(t, fmt.Sprintf("%+v", out), newSecret, oldSecret)
	}
}

// parseSecretError is every message ParseSecret may return: fixed words
// and a length, never a part of the input.
var parseSecretError = regexp.MustCompile(`^webhook secret: (does not start with whsec_|` +
	`the part after whsec_ is not standard base64|key is \d+ bytes, want 24 to 64)$`)

// FuzzParseSecret: no input panics; an accepted secret has the prefix and a
// key of an allowed size; every error is one of the fixed messages.
func FuzzParseSecret(f *testing.F) {
	f.Add(vectorSecret)
	f.Add(newSecret + "\n")
	f.Add("whsec_!!!!")
	f.Add("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	f.Fuzz(func(t *testing.T, s string) {
		key, err := webhook.ParseSecret(s)
		if err != nil {
			if !parseSecretError.MatchString(err.Error()) {
				t.Fatalf("error %q is none of ParseSecret's fixed messages (which quote nothing)", err)
			}
			return
		}
		if len(key) < webhook.MinKeyLen || len(key) > webhook.MaxKeyLen {
			t.Fatalf("accepted a %d-byte key", len(key))
		}
		if !strings.HasPrefix(strings.TrimSpace(s), "whsec_") {
			t.Fatalf("accepted %q without the whsec_ prefix", s)
		}
	})
}

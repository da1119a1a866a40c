package main

// These tests hold the receiver to the Standard Webhooks specification
// from both ends: it accepts the specification's published vector, and it
// accepts what herald's webhook adapter really sends, through a rotation,
// while it refuses every tampered or stale request.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/webhook"
)

// The vector of the specification's libraries (standard-webhooks/
// standard-webhooks, libraries/go/webhook_test.go, TestWebhookSign).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var (
	newSecret   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receiver-test-new-key-0123456789"))
	oldSecret   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receiver-test-old-key-0123456789"))
	otherSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receiver-test-other-key-01234567"))
	signedAt    = time.Date(2026, 12, 1, 9, 30, 15, 0, time.UTC)
)

func keys(t *testing.T, secrets ...string) [][]byte {
	t.Helper()
	k, err := ParseSecrets(strings.Join(secrets, " "))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func message(id string) provider.Message {
	return provider.Message{MessageID: id, Recipient: "user-42", Kind: "payment.paid",
		Channel: heraldtype.ChannelWebhook, Title: "Payment received", Body: "Paid 5,000 won"}
}

// heraldSender is herald's webhook adapter posting to url, signing with
// secrets at signedAt.
func heraldSender(t *testing.T, url string, secrets ...string) *webhook.Webhook {
	t.Helper()
	hk := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := webhook.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		hk[i] = k
	}
	return webhook.New(webhook.Config{URL: url, Timeout: 30 * time.Second, Secrets: hk,
		Now: func() time.Time { return signedAt }})
}

// inbox collects what the receiver handled.
type inbox struct {
	mu  sync.Mutex
	got []Notification
}

func (b *inbox) handle(_ context.Context, n Notification) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, n)
	return nil
}

func (b *inbox) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, n := range b.got {
		ids = append(ids, n.MessageID)
	}
	return ids
}

// receiver starts the example's handler, knowing secrets, its clock 42 s
// after herald's.
func receiver(t *testing.T, b *inbox, secrets ...string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(Handler(keys(t, secrets...), func() time.Time { return signedAt.Add(42 * time.Second) }, b.handle))
	t.Cleanup(ts.Close)
	return ts
}

func TestVerifyAcceptsTheSpecificationVector(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp))
	h.Set("webhook-signature", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,x "+vectorSignature)
	k := keys(t, vectorSecret)
	if err := Verify(k, h, []byte(vectorBody), time.Unix(vectorTimestamp, 0), Tolerance); err != nil {
		t.Fatalf("Verify(vector) = %v", err)
	}
	if err := Verify(k, h, []byte(`{"test": 2432232315}`), time.Unix(vectorTimestamp, 0), Tolerance); !errors.Is(err, ErrNoSignature) {
		t.Fatalf("Verify(vector, other body) = %v, want ErrNoSignature", err)
	}
}

// TestHeraldToReceiver sends through herald's adapter to the receiver.
func TestHeraldToReceiver(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		signWith  []string // herald's secrets
		knows     []string // the receiver's
		class     provider.Class
		delivered bool
	}{
		{"OneSecret", []string{newSecret}, []string{newSecret}, provider.Accepted, true},
		// Rotation: herald signs with both while the receivers move over.
		{"RotationReceiverKnowsOnlyTheOld", []string{newSecret, oldSecret}, []string{oldSecret}, provider.Accepted, true},
		{"RotationReceiverKnowsOnlyTheNew", []string{newSecret, oldSecret}, []string{newSecret}, provider.Accepted, true},
		{"ReceiverKnowsBothHeraldOnlyTheNew", []string{newSecret}, []string{oldSecret, newSecret}, provider.Accepted, true},
		// A wrong secret is a 401: herald retries later, nothing handled.
		{"WrongSecretIsRefused", []string{newSecret, oldSecret}, []string{otherSecret}, provider.NotSent, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var b inbox
			ts := receiver(t, &b, c.knows...)
			m := message("ntf-1." + c.name)
			out := heraldSender(t, ts.URL, c.signWith...).Send(context.Background(), m)
			if out.Class != c.class {
				t.Fatalf("herald's outcome = %+v, want %v", out, c.class)
			}
			if c.class == provider.NotSent && out.Reason != "HTTP_401" {
				t.Fatalf("herald's outcome = %+v, want HTTP_401", out)
			}
			want := []string(nil)
			if c.delivered {
				want = []string{m.MessageID}
			}
			if got := b.ids(); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("handled %q, want %q", got, want)
			}
			if c.delivered && b.got[0] != (Notification{MessageID: m.MessageID, Recipient: m.Recipient, Kind: m.Kind,
				Channel: string(m.Channel), Title: m.Title, Body: m.Body}) {
				t.Fatalf("handled %+v, want the message's fields", b.got[0])
			}
		})
	}
}

// captured is one request herald's adapter sent, as received.
type captured struct {
	header http.Header
	body   []byte
}

// capture sends m through herald's adapter (signing with secrets) and
// returns the request as a server received it.
func capture(t *testing.T, m provider.Message, secrets ...string) captured {
	t.Helper()
	got := make(chan captured, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		got <- captured{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ts.Close()
	if out := heraldSender(t, ts.URL, secrets...).Send(context.Background(), m); out.Class != provider.Accepted {
		t.Fatalf("capture: outcome %+v", out)
	}
	return <-got
}

// TestVerifyRefusesTamperedAndStale changes one thing at a time in a real
// signed request, and moves the receiver's clock around the tolerance.
func TestVerifyRefusesTamperedAndStale(t *testing.T) {
	t.Parallel()
	req := capture(t, message("ntf-2.webhook"), newSecret, oldSecret)
	k := keys(t, oldSecret)
	ts := req.header.Get("webhook-timestamp")
	cases := []struct {
		name   string
		change func(h http.Header, body []byte) []byte
		now    time.Time
		want   error
	}{
		{"AsSent", nil, signedAt, nil},
		{"ExactlyTheToleranceLate", nil, signedAt.Add(Tolerance), nil},
		{"ExactlyTheToleranceEarly", nil, signedAt.Add(-Tolerance), nil},
		{"OneSecondPastTheTolerance", nil, signedAt.Add(Tolerance + time.Second), ErrStale},
		{"OneSecondBeforeTheTolerance", nil, signedAt.Add(-Tolerance - time.Second), ErrStale},
		{"BodyByteChanged", func(_ http.Header, b []byte) []byte {
			return []byte(strings.Replace(string(b), "5,000", "9,000", 1))
		}, signedAt, ErrNoSignature},
		{"BodyReencoded", func(_ http.Header, b []byte) []byte { return append(b, '\n') }, signedAt, ErrNoSignature},
		{"TimestampMoved", func(h http.Header, b []byte) []byte {
			h.Set("webhook-timestamp", strconv.FormatInt(signedAt.Unix()+1, 10))
			return b
		}, signedAt, ErrNoSignature},
		{"TimestampWithLeadingZero", func(h http.Header, b []byte) []byte {
			h.Set("webhook-timestamp", "0"+ts)
			return b
		}, signedAt, ErrNoSignature},
		{"TimestampNotANumber", func(h http.Header, b []byte) []byte {
			h.Set("webhook-timestamp", ts+".5")
			return b
		}, signedAt, ErrBadTimestamp},
		{"IDChanged", func(h http.Header, b []byte) []byte {
			h.Set("webhook-id", "ntf-3.webhook")
			return b
		}, signedAt, ErrNoSignature},
		{"SignatureRemoved", func(h http.Header, b []byte) []byte { h.Del("webhook-signature"); return b }, signedAt, ErrMissingHeaders},
		{"IDRemoved", func(h http.Header, b []byte) []byte { h.Del("webhook-id"); return b }, signedAt, ErrMissingHeaders},
		{"OtherVersionOnly", func(h http.Header, b []byte) []byte {
			h.Set("webhook-signature", strings.ReplaceAll(h.Get("webhook-signature"), "v1,", "v1a,"))
			return b
		}, signedAt, ErrNoSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, body := req.header.Clone(), append([]byte(nil), req.body...)
			if c.change != nil {
				body = c.change(h, body)
			}
			err := Verify(k, h, body, c.now, Tolerance)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
			if err != nil {
				for _, s := range []string{oldSecret, newSecret, strings.TrimPrefix(oldSecret, "whsec_")} {
					if strings.Contains(err.Error(), s) {
						t.Fatalf("error %q holds a secret", err)
					}
				}
			}
		})
	}
}

func TestHandlerAnswers(t *testing.T) {
	t.Parallel()
	req := capture(t, message("ntf-4.webhook"), newSecret)
	var b inbox
	ts := receiver(t, &b, newSecret)
	post := func(h http.Header, body string) int {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header = h
		resp, err := ts.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(req.header.Clone(), string(req.body)+" "); got != http.StatusUnauthorized {
		t.Errorf("tampered body: %d, want 401", got)
	}
	if got := post(http.Header{}, string(req.body)); got != http.StatusUnauthorized {
		t.Errorf("unsigned: %d, want 401", got)
	}
	if got := b.ids(); len(got) != 0 {
		t.Errorf("handled %q from refused requests", got)
	}
	if got := post(req.header.Clone(), string(req.body)); got != http.StatusNoContent {
		t.Errorf("as sent: %d, want 204", got)
	}
	// A signed body that is no notification is a permanent refusal.
	h := req.header.Clone()
	h.Set("webhook-signature", webhook.Sign(keys(t, newSecret), h.Get("webhook-id"), signedAt, []byte("[]")))
	if got := post(h, "[]"); got != http.StatusBadRequest {
		t.Errorf("signed non-notification: %d, want 400", got)
	}
	// A handler that did nothing asks for the notification again (429,
	// which herald retries); one that cannot say what it did answers 500
	// (herald's UNKNOWN, never resent by itself).
	for handleErr, want := range map[error]int{
		fmt.Errorf("database unreachable: %w", ErrNotProcessed): http.StatusTooManyRequests,
		errors.New("commit outcome unknown"):                    http.StatusInternalServerError,
	} {
		failing := httptest.NewServer(Handler(keys(t, newSecret), func() time.Time { return signedAt.Add(42 * time.Second) },
			func(context.Context, Notification) error { return handleErr }))
		r, _ := http.NewRequest(http.MethodPost, failing.URL, strings.NewReader(string(req.body)))
		r.Header = req.header.Clone()
		resp, err := failing.Client().Do(r)
		failing.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusTooManyRequests) != (resp.Header.Get("Retry-After") != "") {
			t.Errorf("handler error %q: %d (Retry-After %q), want %d", handleErr, resp.StatusCode, resp.Header.Get("Retry-After"), want)
		}
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	k, err := ParseSecrets("  " + newSecret + "\n" + oldSecret + " ")
	if err != nil || len(k) != 2 || string(k[0]) != "receiver-test-new-key-0123456789" {
		t.Fatalf("ParseSecrets(two) = %q, %v", k, err)
	}
	for _, bad := range []string{"", "   ", strings.TrimPrefix(newSecret, "whsec_"), newSecret + " whsec_" + "%%%%" + newSecret[6:]} {
		_, err := ParseSecrets(bad)
		if err == nil {
			t.Fatalf("ParseSecrets(%q) accepted it", bad)
		}
		if b64 := strings.TrimPrefix(newSecret, "whsec_"); strings.Contains(err.Error(), b64[:8]) {
			t.Fatalf("error %q quotes the secret", err)
		}
	}
}

// TestServe runs the program's server on a real listener: herald's adapter
// is answered, and a cancelled context stops it cleanly.
func TestServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var b inbox
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, ln, Handler(keys(t, newSecret), func() time.Time { return signedAt }, b.handle))
	}()
	out := heraldSender(t, "http://"+ln.Addr().String()+"/hooks/herald", newSecret).Send(context.Background(), message("ntf-5.webhook"))
	if out.Class != provider.Accepted {
		t.Fatalf("outcome %+v, want accepted", out)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	if got := b.ids(); len(got) != 1 || got[0] != "ntf-5.webhook" {
		t.Fatalf("handled %q", got)
	}
}

// FuzzVerifyRoundTrip: whatever the id and body, what herald's Sign signs
// Verify accepts, and the same with one more body byte it refuses; no
// header value makes Verify panic.
func FuzzVerifyRoundTrip(f *testing.F) {
	f.Add("ntf-1.webhook", []byte(`{"message_id":"ntf-1.webhook"}`), int64(0), "")
	f.Add("a.1", []byte("1.{}"), int64(-300), "v1,,, v1")
	f.Add("x", []byte{}, int64(301), "v1,AAAA")
	f.Fuzz(func(t *testing.T, id string, body []byte, skew int64, junk string) {
		k := [][]byte{[]byte("fuzz-key-0123456789abcdef")}
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(signedAt.Unix(), 10))
		h.Set("webhook-signature", junk+" "+webhook.Sign(k, id, signedAt, body))
		now := signedAt.Add(time.Duration(skew) * time.Second)
		err := Verify(k, h, body, now, Tolerance)
		inTolerance := skew >= -300 && skew <= 300
		switch {
		case id == "":
			if err == nil {
				t.Fatal("accepted without an id")
			}
		case inTolerance && err != nil:
			t.Fatalf("Verify(signed, skew %d s) = %v", skew, err)
		case !inTolerance && !errors.Is(err, ErrStale):
			t.Fatalf("Verify(signed, skew %d s) = %v, want ErrStale", skew, err)
		}
		if inTolerance && Verify(k, h, append(body, 'x'), now, Tolerance) == nil {
			t.Fatal("accepted a body with a byte added")
		}
		h.Set("webhook-signature", junk)
		h.Set("webhook-timestamp", junk)
		_ = Verify(k, h, body, now, Tolerance)
	})
}

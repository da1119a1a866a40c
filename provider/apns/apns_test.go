package apns_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/apns"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
)

// waitLimit bounds every channel wait so a broken test fails, not hangs.
const waitLimit = 60 * time.Second

var epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const device = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

func message(id string) provider.Message {
	return provider.Message{
		MessageID: id,
		Tenant:    "tenant-1",
		Recipient: "user-42",
		Kind:      "payment.paid",
		Channel:   heraldtype.Channel("push"),
		Address:   device,
		Title:     "Payment received",
		Body:      "Paid 5,000 won",
	}
}

// bundle is an adapter wired to a fake, and what a test needs of both.
type bundle struct {
	apns  *apns.APNs
	fake  *fake
	clock *clock.Fake
	p8    []byte
}

// setup starts a fake and an adapter that trusts it, on one fake clock.
func setup(t *testing.T, edit ...func(*apns.Config)) bundle {
	t.Helper()
	key, p8 := newKey(t)
	clk := clock.NewFake(epoch)
	f := newFake(t, &key.PublicKey, clk, 0)
	return bundle{apns: newAdapter(t, f, clk, p8, edit...), fake: f, clock: clk, p8: p8}
}

// newAdapter returns an adapter signing with p8 that trusts f, closed at
// the end of the test.
func newAdapter(t *testing.T, f *fake, clk clock.Clock, p8 []byte, edit ...func(*apns.Config)) *apns.APNs {
	t.Helper()
	cfg := apns.Config{
		KeyP8: p8, KeyID: keyID, TeamID: teamID, Topic: topic,
		Endpoint: f.srv.URL, RootCAs: f.roots(), Clock: clk, Timeout: 30 * time.Second,
	}
	for _, e := range edit {
		e(&cfg)
	}
	a, err := apns.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func (b bundle) send(m provider.Message) provider.Outcome {
	return b.apns.Send(context.Background(), m)
}

// classRow is one row of the package doc's classification table.
type classRow struct {
	name     string
	status   int
	reason   string
	class    provider.Class
	code     string
	dead     bool
	retry    time.Duration
	rotates  bool // the provider token is signed again for the next call
	uniqueID string
}

// classification is the package doc's table, row by row.
var classification = []classRow{
	{name: "200IsAccepted", status: 200, class: provider.Accepted},
	{name: "200WithUniqueIDIsAcceptedWithThatRef", status: 200, class: provider.Accepted, uniqueID: "5b5d9d5e-0000-4000-8000-00000000abcd"},
	{name: "400BadDeviceTokenIsADeadDevice", status: 400, reason: "BadDeviceToken", class: provider.Permanent, code: "APNS_BAD_DEVICE_TOKEN", dead: true},
	{name: "400BadCollapseIdIsPermanent", status: 400, reason: "BadCollapseId", class: provider.Permanent, code: "APNS_BAD_COLLAPSE_ID"},
	{name: "400BadExpirationDateIsPermanent", status: 400, reason: "BadExpirationDate", class: provider.Permanent, code: "APNS_BAD_EXPIRATION_DATE"},
	{name: "400BadMessageIdIsPermanent", status: 400, reason: "BadMessageId", class: provider.Permanent, code: "APNS_BAD_MESSAGE_ID"},
	{name: "400BadPriorityIsPermanent", status: 400, reason: "BadPriority", class: provider.Permanent, code: "APNS_BAD_PRIORITY"},
	{name: "400BadTopicIsPermanent", status: 400, reason: "BadTopic", class: provider.Permanent, code: "APNS_BAD_TOPIC"},
	{name: "400DeviceTokenNotForTopicIsPermanentNotDead", status: 400, reason: "DeviceTokenNotForTopic", class: provider.Permanent, code: "APNS_DEVICE_TOKEN_NOT_FOR_TOPIC"},
	{name: "400DuplicateHeadersIsPermanent", status: 400, reason: "DuplicateHeaders", class: provider.Permanent, code: "APNS_DUPLICATE_HEADERS"},
	{name: "400IdleTimeoutIsPermanent", status: 400, reason: "IdleTimeout", class: provider.Permanent, code: "APNS_IDLE_TIMEOUT"},
	{name: "400InvalidPushTypeIsPermanent", status: 400, reason: "InvalidPushType", class: provider.Permanent, code: "APNS_INVALID_PUSH_TYPE"},
	{name: "400MissingDeviceTokenIsPermanent", status: 400, reason: "MissingDeviceToken", class: provider.Permanent, code: "APNS_MISSING_DEVICE_TOKEN"},
	{name: "400MissingTopicIsPermanent", status: 400, reason: "MissingTopic", class: provider.Permanent, code: "APNS_MISSING_TOPIC"},
	{name: "400PayloadEmptyIsPermanent", status: 400, reason: "PayloadEmpty", class: provider.Permanent, code: "APNS_PAYLOAD_EMPTY"},
	{name: "400TopicDisallowedIsPermanent", status: 400, reason: "TopicDisallowed", class: provider.Permanent, code: "APNS_TOPIC_DISALLOWED"},
	{name: "400UnlistedReasonIsPermanentByStatus", status: 400, reason: "Some free text <b>", class: provider.Permanent, code: "HTTP_400"},
	{name: "403ExpiredProviderTokenIsNotSentAndRotates", status: 403, reason: "ExpiredProviderToken", class: provider.NotSent, code: "APNS_EXPIRED_PROVIDER_TOKEN", rotates: true},
	{name: "403InvalidProviderTokenIsNotSentAndRotates", status: 403, reason: "InvalidProviderToken", class: provider.NotSent, code: "APNS_INVALID_PROVIDER_TOKEN", rotates: true},
	{name: "403BadCertificateIsNotSent", status: 403, reason: "BadCertificate", class: provider.NotSent, code: "APNS_BAD_CERTIFICATE"},
	{name: "403BadCertificateEnvironmentIsNotSent", status: 403, reason: "BadCertificateEnvironment", class: provider.NotSent, code: "APNS_BAD_CERTIFICATE_ENVIRONMENT"},
	{name: "403ForbiddenIsNotSent", status: 403, reason: "Forbidden", class: provider.NotSent, code: "APNS_FORBIDDEN"},
	{name: "403MissingProviderTokenIsNotSent", status: 403, reason: "MissingProviderToken", class: provider.NotSent, code: "APNS_MISSING_PROVIDER_TOKEN"},
	{name: "403UnlistedReasonIsNotSent", status: 403, reason: "", class: provider.NotSent, code: "HTTP_403"},
	{name: "404BadPathIsPermanent", status: 404, reason: "BadPath", class: provider.Permanent, code: "APNS_BAD_PATH"},
	{name: "405MethodNotAllowedIsPermanent", status: 405, reason: "MethodNotAllowed", class: provider.Permanent, code: "APNS_METHOD_NOT_ALLOWED"},
	{name: "410UnregisteredIsADeadDevice", status: 410, reason: "Unregistered", class: provider.Permanent, code: "APNS_UNREGISTERED", dead: true},
	{name: "410ExpiredTokenIsADeadDevice", status: 410, reason: "ExpiredToken", class: provider.Permanent, code: "APNS_EXPIRED_TOKEN", dead: true},
	{name: "410UnlistedReasonIsADeadDevice", status: 410, reason: "", class: provider.Permanent, code: "HTTP_410", dead: true},
	{name: "413PayloadTooLargeIsPermanent", status: 413, reason: "PayloadTooLarge", class: provider.Permanent, code: "APNS_PAYLOAD_TOO_LARGE"},
	{name: "429TooManyRequestsIsNotSentWithBackoff", status: 429, reason: "TooManyRequests", class: provider.NotSent, code: "APNS_TOO_MANY_REQUESTS", retry: apns.TooManyRequestsBackoff},
	{name: "429TooManyProviderTokenUpdatesIsNotSentWithBackoff", status: 429, reason: "TooManyProviderTokenUpdates", class: provider.NotSent, code: "APNS_TOO_MANY_PROVIDER_TOKEN_UPDATES", retry: apns.TooManyRequestsBackoff},
	{name: "500InternalServerErrorIsUnknown", status: 500, reason: "InternalServerError", class: provider.Unknown, code: "APNS_INTERNAL_SERVER_ERROR"},
	{name: "503ServiceUnavailableIsUnknown", status: 503, reason: "ServiceUnavailable", class: provider.Unknown, code: "APNS_SERVICE_UNAVAILABLE"},
	{name: "503ShutdownIsUnknown", status: 503, reason: "Shutdown", class: provider.Unknown, code: "APNS_SHUTDOWN"},
	{name: "502OtherStatusIsUnknownAsWebhook", status: 502, class: provider.Unknown, code: "HTTP_502"},
	{name: "401OtherStatusIsNotSentAsWebhook", status: 401, class: provider.NotSent, code: "HTTP_401"},
}

// TestClassification walks the package doc's table against the fake: each
// row is the fake's answer to one device token.
func TestClassification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, row := range classification {
		t.Run(row.name, func(t *testing.T) {
			// The rows share one adapter and one clock; each row's device
			// gets its own answer. Sequential: the rotating rows move the
			// clock and look at the token the next call carries.
			dev := fmt.Sprintf("%064x", i+1)
			b.fake.answerFor(dev, answer{status: row.status, reason: row.reason, uniqueID: row.uniqueID})
			m := message("msg-" + row.name)
			m.Address = dev
			b.clock.Advance(2 * time.Minute) // past the forced-rotation gap
			before := len(b.fake.seen())
			out := b.send(m)
			wantOutcome(t, out, row.class, row.code)
			if out.DeadDestination != row.dead {
				t.Errorf("DeadDestination = %v, want %v", out.DeadDestination, row.dead)
			}
			if out.RetryAfter != row.retry {
				t.Errorf("RetryAfter = %v, want %v", out.RetryAfter, row.retry)
			}
			got := b.fake.seen()
			if len(got) != before+1 {
				t.Fatalf("the fake saw %d requests, want exactly one more than %d", len(got), before)
			}
			if row.class == provider.Accepted {
				want := apns.APNsID(m.MessageID)
				if row.uniqueID != "" {
					want = row.uniqueID
				}
				if out.ProviderRef != want {
					t.Errorf("ProviderRef = %q, want %q", out.ProviderRef, want)
				}
			}
			// The next call shows whether the token was signed again.
			b.fake.answerFor(dev, answer{status: 200})
			if out := b.send(m); out.Class != provider.Accepted {
				t.Fatalf("follow-up call: %+v", out)
			}
			after := b.fake.seen()
			rotated := after[len(after)-1].token != after[len(after)-2].token
			if rotated != row.rotates {
				t.Errorf("provider token signed again = %v, want %v", rotated, row.rotates)
			}
		})
	}
}

// TestClassifyRowsWithoutACall: the refusals made before any call.
func TestClassifyRowsWithoutACall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := message("msg-too-large")
	long.Body = strings.Repeat("가", 2000) // 6,000 bytes of UTF-8
	for _, tc := range []struct {
		name    string
		address string
		m       provider.Message
		code    string
		dead    bool
	}{
		{"NoDeviceTokenIsPermanent", "", message("msg-no-token"), "MISSING_DEVICE_TOKEN", false},
		{"NonHexTokenIsADeadDevice", "../../3/device/x?y", message("msg-bad-token"), "APNS_MALFORMED_DEVICE_TOKEN", true},
		{"OverlongTokenIsADeadDevice", strings.Repeat("ab", 101), message("msg-long-token"), "APNS_MALFORMED_DEVICE_TOKEN", true},
		{"PayloadOver4096BytesIsPermanent", device, long, "APNS_PAYLOAD_TOO_LARGE", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.Address = tc.address
			out := b.send(m)
			wantOutcome(t, out, provider.Permanent, tc.code)
			if out.DeadDestination != tc.dead {
				t.Errorf("DeadDestination = %v, want %v", out.DeadDestination, tc.dead)
			}
		})
	}
	if n := len(b.fake.seen()); n != 0 {
		t.Fatalf("the fake saw %d requests, want none", n)
	}
}

// TestTransportFailures: NotSent before a stream was held for the request,
// Unknown once it may have been written.
func TestTransportFailures(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		addr := httpcalltest.ClosedAddr(t)
		b := setup(t, func(c *apns.Config) { c.Endpoint = "https://" + addr })
		wantOutcome(t, b.send(message("msg-refused")), provider.NotSent, "CONNECTION_REFUSED")
	})

	t.Run("UntrustedCertificateIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *apns.Config) { c.RootCAs = x509.NewCertPool() })
		wantOutcome(t, b.send(message("msg-untrusted")), provider.NotSent, "TLS_FAILURE")
		if n := len(b.fake.seen()); n != 0 {
			t.Fatalf("the fake saw %d requests, want none", n)
		}
	})

	t.Run("NoAnswerAfterTheRequestWasWrittenIsUnknown", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		b := setup(t, func(c *apns.Config) { c.Timeout = 2 * time.Second })
		b.fake.setHold(func(*http.Request) { <-release })
		wantOutcome(t, b.send(message("msg-silent")), provider.Unknown, "TIMEOUT")
	})

	// The deadline passes once the HEADERS frame is out and before net/http
	// reports the request written (RoundTrip does not wait for its writer,
	// held here in its WroteHeaders hook until Send has returned): APNs may
	// hold the request, so the call is Unknown, not NotSent.
	t.Run("DeadlineWhileWritingIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := httpcalltest.NewDeadline()
		release := ctx.ExpireAfterHeaders()
		out := b.apns.Send(ctx, message("msg-cut"))
		release()
		wantOutcome(t, out, provider.Unknown, "TIMEOUT_WHILE_WRITING")
	})

	t.Run("StreamResetAfterTheRequestWasWrittenIsUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A handler that panics with ErrAbortHandler makes the server
		// reset the stream (RST_STREAM) after it read the whole request.
		b.fake.setHold(func(*http.Request) { panic(http.ErrAbortHandler) })
		wantOutcome(t, b.send(message("msg-reset")), provider.Unknown)
	})

	t.Run("CanceledBeforeTheCallIsNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantOutcome(t, b.apns.Send(ctx, message("msg-canceled")), provider.NotSent)
		if n := len(b.fake.seen()); n != 0 {
			t.Fatalf("the fake saw %d requests, want none", n)
		}
	})
}

func wantOutcome(t *testing.T, got provider.Outcome, class provider.Class, reason ...string) {
	t.Helper()
	if got.Class != class {
		t.Fatalf("outcome = %+v (class %v), want class %v", got, got.Class, class)
	}
	if len(reason) > 0 && got.Reason != reason[0] {
		t.Fatalf("outcome = %+v, want reason %q", got, reason[0])
	}
	if rate := strings.HasPrefix(got.Reason, "APNS_TOO_MANY_"); got.RateLimited != rate {
		t.Fatalf("outcome = %+v, want RateLimited %v (a refusal for the rate slows the shared limit)", got, rate)
	}
}

// TestWireFormat: the request as Apple documents it.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := message("ntf_01JABC-push-1")
	if out := b.send(m); out.Class != provider.Accepted {
		t.Fatalf("outcome = %+v", out)
	}
	s := b.fake.last(t)
	if s.proto != 2 {
		t.Errorf("HTTP/%d, want HTTP/2", s.proto)
	}
	if s.path != "/3/device/"+device {
		t.Errorf("path = %q", s.path)
	}
	want := map[string]string{
		"apns-id":          apns.APNsID(m.MessageID),
		"apns-push-type":   "alert",
		"apns-topic":       topic,
		"apns-priority":    "10",
		"apns-expiration":  strconv.FormatInt(epoch.Add(24*time.Hour).Unix(), 10),
		"apns-collapse-id": "",
	}
	for k, v := range want {
		if got := s.header.Values(k); (v == "" && len(got) != 0) || (v != "" && (len(got) != 1 || got[0] != v)) {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !strings.HasPrefix(s.header.Get("authorization"), "bearer ") {
		t.Errorf("authorization is not a bearer token")
	}
	if s.kid != keyID || s.claims["iss"] != teamID || s.claims["iat"] != float64(epoch.Unix()) || len(s.claims) != 2 {
		t.Errorf("token kid %q claims %v, want kid %q, exactly iss %q and iat %d", s.kid, s.claims, keyID, teamID, epoch.Unix())
	}
	var body map[string]any
	if err := json.Unmarshal(s.body, &body); err != nil {
		t.Fatal(err)
	}
	wantBody := map[string]any{
		"aps":        map[string]any{"alert": map[string]any{"title": m.Title, "body": m.Body}},
		"message_id": m.MessageID,
	}
	if fmt.Sprint(body) != fmt.Sprint(wantBody) {
		t.Errorf("body = %v, want %v", body, wantBody)
	}
	for _, leak := range []string{m.Recipient, m.Tenant} {
		if strings.Contains(string(s.body), leak) {
			t.Errorf("body carries %q", leak)
		}
	}
}

// TestHeadersFromConfig: priority, expiration and collapse id as configured.
func TestHeadersFromConfig(t *testing.T) {
	t.Parallel()
	longKind := strings.Repeat("k", 65)
	sum := sha256.Sum256([]byte(longKind))
	longKindHash := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name   string
		edit   func(*apns.Config)
		kind   string
		header string
		want   string
	}{
		{"PriorityFive", func(c *apns.Config) { c.Priority = 5 }, "", "apns-priority", "5"},
		{"TTL", func(c *apns.Config) { c.TTL = time.Hour }, "", "apns-expiration", strconv.FormatInt(epoch.Add(time.Hour).Unix(), 10)},
		{"NegativeTTLIsZero", func(c *apns.Config) { c.TTL = -1 }, "", "apns-expiration", "0"},
		{"CollapseIDFixed", func(c *apns.Config) { c.CollapseID = "payments" }, "payment.paid", "apns-collapse-id", "payments"},
		{"CollapseByKind", func(c *apns.Config) { c.CollapseByKind = true }, "payment.paid", "apns-collapse-id", "payment.paid"},
		{"CollapseByLongKindIsItsHash", func(c *apns.Config) { c.CollapseByKind = true }, longKind, "apns-collapse-id", longKindHash},
		{"NoCollapseByDefault", nil, "payment.paid", "apns-collapse-id", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var edits []func(*apns.Config)
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			b := setup(t, edits...)
			m := message("msg-" + tc.name)
			m.Kind = tc.kind
			if out := b.send(m); out.Class != provider.Accepted {
				t.Fatalf("outcome = %+v", out)
			}
			got := b.fake.last(t).header.Values(tc.header)
			if (tc.want == "" && len(got) != 0) || (tc.want != "" && (len(got) != 1 || got[0] != tc.want)) {
				t.Errorf("%s = %q, want %q", tc.header, got, tc.want)
			}
		})
	}
}

// TestTokenReusedAndRotatedBeforeAnHour: one token for every call until it
// is 50 minutes old, a new one then, and never one APNs would call expired.
func TestTokenReusedAndRotatedBeforeAnHour(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var tokens []string
	for _, step := range []time.Duration{0, 10 * time.Minute, 39*time.Minute + 59*time.Second} {
		b.clock.Advance(step)
		if out := b.send(message("msg-reuse")); out.Class != provider.Accepted {
			t.Fatalf("outcome = %+v", out)
		}
		tokens = append(tokens, b.fake.last(t).token)
	}
	if tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Fatalf("the token changed within 50 minutes")
	}
	b.clock.Advance(time.Second) // 50 minutes after the first signature
	if out := b.send(message("msg-rotated")); out.Class != provider.Accepted {
		t.Fatalf("outcome = %+v", out)
	}
	s := b.fake.last(t)
	if s.token == tokens[0] {
		t.Fatalf("the token was not signed again at 50 minutes")
	}
	if s.claims["iat"] != float64(epoch.Add(50*time.Minute).Unix()) {
		t.Fatalf("iat = %v, want %d", s.claims["iat"], epoch.Add(50*time.Minute).Unix())
	}
	// Sent every 10 minutes for three hours, no call meets an expired token.
	for i := range 18 {
		b.clock.Advance(10 * time.Minute)
		if out := b.send(message(fmt.Sprintf("msg-hours-%d", i))); out.Class != provider.Accepted {
			t.Fatalf("after %d minutes: %+v", 50+10*(i+1), out)
		}
	}
	distinct := map[string]bool{}
	for _, s := range b.fake.seen() {
		distinct[s.token] = true
	}
	// 50 + 180 minutes: signed at 0, 50, 100, 150, 200.
	if len(distinct) != 5 {
		t.Fatalf("%d distinct tokens over 230 minutes, want 5 (one each 50 minutes)", len(distinct))
	}
}

// stepClock is a clock a test can set anywhere, backwards too.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// TestClockSteppedBackSignsAgain: a token whose iat is ahead of a clock
// that was stepped back is not kept for 50 more minutes (APNs refuses an
// iat in its future).
func TestClockSteppedBackSignsAgain(t *testing.T) {
	t.Parallel()
	clk := &stepClock{now: epoch.Add(30 * time.Minute)}
	key, p8 := newKey(t)
	f := newFake(t, &key.PublicKey, clk, 0)
	a := newAdapter(t, f, clk, p8)
	clk.Set(epoch) // NTP steps the clock back half an hour
	if out := a.Send(context.Background(), message("msg-stepped-back")); out.Class != provider.Accepted {
		t.Fatalf("outcome = %+v", out)
	}
	if s := f.last(t); s.claims["iat"] != float64(epoch.Unix()) {
		t.Fatalf("iat = %v, want %d (signed again on the stepped-back clock)", s.claims["iat"], epoch.Unix())
	}
}

// TestRefusedTokenIsSignedAgainOnce: ExpiredProviderToken makes the next
// call carry a new token; many calls refused at once sign one new token;
// a token refused in its first minute is kept (a new signature would not
// cure what is wrong).
func TestRefusedTokenIsSignedAgainOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if out := b.send(message("msg-first")); out.Class != provider.Accepted {
		t.Fatalf("outcome = %+v", out)
	}
	old := b.fake.last(t).token

	t.Run("YoungTokenIsKept", func(t *testing.T) {
		b.fake.refuseToken(old, "ExpiredProviderToken")
		wantOutcome(t, b.send(message("msg-young")), provider.NotSent, "APNS_EXPIRED_PROVIDER_TOKEN")
		wantOutcome(t, b.send(message("msg-young-again")), provider.NotSent, "APNS_EXPIRED_PROVIDER_TOKEN")
		if s := b.fake.last(t); s.token != old {
			t.Fatal("a token refused in its first minute was signed again")
		}
	})

	t.Run("ConcurrentRefusalsRotateOnce", func(t *testing.T) {
		b.clock.Advance(5 * time.Minute)
		// No refusal is answered before all 50 calls carry the old token.
		hold, _ := barrier(50)
		b.fake.setHold(hold)
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				out := b.send(message(fmt.Sprintf("msg-expired-%d", i)))
				if out.Class != provider.NotSent || out.Reason != "APNS_EXPIRED_PROVIDER_TOKEN" {
					t.Errorf("outcome = %+v", out)
				}
			})
		}
		wg.Wait()
		b.fake.setHold(func(*http.Request) {})
		for i := range 5 {
			if out := b.send(message(fmt.Sprintf("msg-after-%d", i))); out.Class != provider.Accepted {
				t.Fatalf("call after the refusal: %+v", out)
			}
		}
		distinct := map[string]bool{}
		for _, s := range b.fake.seen() {
			distinct[s.token] = true
		}
		if len(distinct) != 2 {
			t.Fatalf("%d distinct tokens, want 2: 50 concurrent refusals of one token sign one new token", len(distinct))
		}
	})
}

// TestAPNsIDIsStable: the same message id gives the same RFC 9562 UUID on
// every adapter, as documented (Python's uuid5 computes the same).
func TestAPNsIDIsStable(t *testing.T) {
	t.Parallel()
	// uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL,
	//   "https://github.com/heraldhq/herald#apns-id"), "msg_01J0000000000000000000000")
	const want = "2695b88a-8587-5c46-a2ae-bea99861f0d5"
	if got := apns.APNsID("msg_01J0000000000000000000000"); got != want {
		t.Fatalf("APNsID = %q, want %q", got, want)
	}
	if apns.APNsID("a") == apns.APNsID("b") {
		t.Fatal("two message ids share an apns-id")
	}
	b1, b2 := setup(t), setup(t)
	m := message("msg_01J0000000000000000000000")
	for _, b := range []bundle{b1, b2, b1} {
		if out := b.send(m); out.Class != provider.Accepted || out.ProviderRef != want {
			t.Fatalf("outcome = %+v, want accepted with ref %q", out, want)
		}
		if got := b.fake.last(t).header.Get("apns-id"); got != want {
			t.Fatalf("apns-id = %q, want %q", got, want)
		}
	}
}

// TestNewRefusesBadConfig: one-line errors that hold no secret.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, p8 := newKey(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(p384)
	p8P384 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	// A PEM block whose body is the real key's, under a wrong type, and a
	// truncated key: the key's text must not come back in the error.
	wrongType := []byte(strings.Replace(string(p8), "PRIVATE KEY", "CERTIFICATE", -1))
	truncated := p8[:len(p8)/2]
	block, _ := pem.Decode(p8)
	corrupt := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: block.Bytes[:len(block.Bytes)-8]})
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edDER, _ := x509.MarshalPKCS8PrivateKey(edKey)
	notEC := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})
	good := apns.Config{KeyP8: p8, KeyID: keyID, TeamID: teamID, Topic: topic}
	for _, tc := range []struct {
		name string
		edit func(*apns.Config)
		want string
	}{
		{"NoKey", func(c *apns.Config) { c.KeyP8 = nil }, "apns: key is empty"},
		{"NotPEM", func(c *apns.Config) { c.KeyP8 = []byte("MIGTAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBHkwdwIBAQQg") }, "apns: key: "},
		{"WrongPEMType", func(c *apns.Config) { c.KeyP8 = wrongType }, "apns: key: "},
		{"Truncated", func(c *apns.Config) { c.KeyP8 = truncated }, "apns: key: "},
		{"CorruptPKCS8", func(c *apns.Config) { c.KeyP8 = corrupt }, "apns: key: "},
		{"NotAnECKey", func(c *apns.Config) { c.KeyP8 = notEC }, "EC"},
		{"P384", func(c *apns.Config) { c.KeyP8 = p8P384 }, "P-256"},
		{"NoKeyID", func(c *apns.Config) { c.KeyID = "" }, "key_id"},
		{"NoTeamID", func(c *apns.Config) { c.TeamID = "" }, "team_id"},
		{"NoTopic", func(c *apns.Config) { c.Topic = "" }, "topic"},
		{"HTTPEndpoint", func(c *apns.Config) { c.Endpoint = "http://api.push.apple.com" }, "endpoint"},
		{"Priority", func(c *apns.Config) { c.Priority = 7 }, "priority"},
		{"LongCollapseID", func(c *apns.Config) { c.CollapseID = strings.Repeat("x", 65) }, "collapse_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := good
			tc.edit(&cfg)
			_, err := apns.New(cfg)
			if err == nil {
				t.Fatal("New accepted it")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line naming %q", msg, tc.want)
			}
			assertNoSecret(t, msg, p8, cfg.KeyP8)
		})
	}
	if _, err := apns.New(good); err != nil {
		t.Fatalf("New(good): %v", err)
	}
}

// assertNoSecret fails if s holds any line of a key's PEM body or a
// provider token.
func assertNoSecret(t *testing.T, s string, keys ...[]byte) {
	t.Helper()
	for _, k := range keys {
		for _, line := range strings.Split(string(k), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(s, line[:16]) {
				t.Fatalf("%q holds key material", s)
			}
		}
	}
	if strings.Contains(s, "eyJ") { // every JWT starts with base64 of `{"`
		t.Fatalf("%q holds a token", s)
	}
}

// TestNoSecretInAnyOutcome: no outcome of any path carries the key or the
// provider token, in its reason or its reference.
func TestNoSecretInAnyOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var outs []provider.Outcome
	for i, row := range classification {
		dev := fmt.Sprintf("%064x", 1000+i)
		b.fake.answerFor(dev, answer{status: row.status, reason: row.reason, uniqueID: row.uniqueID})
		m := message("msg-secret-" + row.name)
		m.Address = dev
		outs = append(outs, b.send(m))
	}
	bad := message("msg-secret-local")
	bad.Address = "not hex"
	outs = append(outs, b.send(bad))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	outs = append(outs, b.apns.Send(ctx, message("msg-secret-canceled")))
	// Transport failures, before and after the request was written, with
	// the same key.
	untrusted := newAdapter(t, b.fake, b.clock, b.p8, func(c *apns.Config) { c.RootCAs = x509.NewCertPool() })
	outs = append(outs, untrusted.Send(context.Background(), message("msg-secret-tls")))
	reset := setup(t)
	reset.fake.setHold(func(*http.Request) { panic(http.ErrAbortHandler) })
	outs = append(outs, reset.send(message("msg-secret-reset")))
	for _, out := range outs {
		assertNoSecret(t, out.Reason+" "+out.ProviderRef, b.p8, reset.p8)
		for _, s := range b.fake.seen() {
			if strings.Contains(out.Reason+out.ProviderRef, s.token) {
				t.Fatalf("outcome %+v holds the provider token", out)
			}
		}
	}
}

// TestCallsAreNotQueuedBehindOneConnection: with 250 streams a connection,
// 1,000 calls are all at the fake at once (a barrier in the handler lets
// none answer until all have arrived), over at least four connections.
func TestCallsAreNotQueuedBehindOneConnection(t *testing.T) {
	t.Parallel()
	const calls, streams = 1000, 250
	key, p8 := newKey(t)
	clk := clock.NewFake(epoch)
	f := newFake(t, &key.PublicKey, clk, streams)
	hold, all := barrier(calls)
	f.setHold(hold)
	a := newAdapter(t, f, clk, p8, func(c *apns.Config) { c.Timeout = 2 * waitLimit })
	var wg sync.WaitGroup
	outs := make([]provider.Outcome, calls)
	for i := range calls {
		wg.Go(func() { outs[i] = a.Send(context.Background(), message(fmt.Sprintf("msg-spread-%d", i))) })
	}
	select {
	case <-all:
	case <-time.After(waitLimit):
		t.Fatalf("only some of %d calls reached the fake at once: calls queue behind a connection's stream limit", calls)
	}
	wg.Wait()
	for i, out := range outs {
		if out.Class != provider.Accepted {
			t.Fatalf("call %d: %+v", i, out)
		}
	}
	// At least calls/streams; at most calls/100, since a connection takes
	// 100 streams until the server's SETTINGS frame says 250, and another
	// may be dialled meanwhile. net/http's own pool dialled 883.
	if n := f.conns.Load(); n < calls/streams || n > calls/100 {
		t.Fatalf("%d connections for %d calls at %d streams each, want %d to %d", n, calls, streams, calls/streams, calls/100)
	}
	t.Logf("%d calls in flight at once over %d connections", calls, f.conns.Load())
}

// barrier returns a hold for the fake under which no request is answered
// until n have arrived, and a channel closed when they have.
func barrier(n int) (func(*http.Request), <-chan struct{}) {
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	return func(*http.Request) {
		arrived.Done()
		select {
		case <-all:
		case <-time.After(waitLimit):
		}
	}, all
}

// TestWaitingCallsGetFreedStreams: with MaxConns connections full, a call
// waits for a stream and gets one as soon as one is freed; a call whose
// context ends while it waits is NotSent and never reaches APNs.
func TestWaitingCallsGetFreedStreams(t *testing.T) {
	t.Parallel()
	const streams, maxConns, calls = 5, 2, 25
	key, p8 := newKey(t)
	clk := clock.NewFake(epoch)
	f := newFake(t, &key.PublicKey, clk, streams)
	var (
		mu       sync.Mutex
		inFlight int
		peak     int
	)
	release := make(chan struct{})
	full := make(chan struct{}, calls)
	f.setHold(func(*http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		full <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
	})
	a := newAdapter(t, f, clk, p8, func(c *apns.Config) { c.Timeout = waitLimit; c.MaxConns = maxConns })

	var wg sync.WaitGroup
	outs := make([]provider.Outcome, calls)
	for i := range calls {
		wg.Go(func() { outs[i] = a.Send(context.Background(), message(fmt.Sprintf("msg-wait-%d", i))) })
	}
	for range streams * maxConns {
		select {
		case <-full:
		case <-time.After(waitLimit):
			t.Fatal("the connections were not filled")
		}
	}
	// Every stream is taken: a call that can wait only briefly is not sent.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	wantOutcome(t, a.Send(ctx, message("msg-gave-up")), provider.NotSent, "CONNECT_TIMEOUT")

	close(release)
	wg.Wait()
	for i, out := range outs {
		if out.Class != provider.Accepted {
			t.Fatalf("call %d: %+v", i, out)
		}
	}
	if n := f.conns.Load(); n != maxConns {
		t.Errorf("%d connections, want MaxConns = %d", n, maxConns)
	}
	if peak > streams*maxConns {
		t.Errorf("%d calls at the fake at once, want at most %d", peak, streams*maxConns)
	}
	for _, s := range f.seen() {
		if strings.Contains(string(s.body), "msg-gave-up") {
			t.Fatal("the call that gave up reached the fake")
		}
	}
}

// TestNoSecondDialBeforeTheNewestAnswers: APNs may raise a connection's
// stream limit once a call on it is authenticated, so while the newest
// connection has answered nothing, calls wait rather than dial another.
func TestNoSecondDialBeforeTheNewestAnswers(t *testing.T) {
	t.Parallel()
	// Over net/http's 100 assumed before SETTINGS, so the SETTINGS frame
	// raises the limit and the calls waiting for it are granted at once.
	const streams, calls = 150, 155
	key, p8 := newKey(t)
	clk := clock.NewFake(epoch)
	f := newFake(t, &key.PublicKey, clk, streams)
	arrived := make(chan struct{}, calls)
	answer := make(chan struct{}, calls)
	f.setHold(func(*http.Request) {
		arrived <- struct{}{}
		<-answer
	})
	a := newAdapter(t, f, clk, p8, func(c *apns.Config) { c.Timeout = waitLimit })
	apns.SetProvenAfter(a, time.Hour)

	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			if out := a.Send(context.Background(), message(fmt.Sprintf("msg-prove-%d", i))); out.Class != provider.Accepted {
				t.Errorf("call %d: %+v", i, out)
			}
		})
	}
	for range streams {
		select {
		case <-arrived:
		case <-time.After(waitLimit):
			t.Fatal("the first connection was not filled")
		}
	}
	// The grant that filled the connection decided about dialling before
	// its call could reach the fake.
	if conns, dialing := apns.PoolState(a); conns != 1 || dialing {
		t.Fatalf("%d connections, dialling %v: another was dialled before the first answered", conns, dialing)
	}
	for range calls {
		answer <- struct{}{}
	}
	wg.Wait()
}

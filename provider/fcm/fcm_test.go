package fcm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/fcm"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
)

// want is an expected outcome; every field is compared.
type want struct {
	class      provider.Class
	reason     string
	dead       bool
	retryAfter time.Duration
}

func check(t *testing.T, got provider.Outcome, w want) {
	t.Helper()
	if rate := w.reason == "FCM_QUOTA_EXCEEDED" || w.reason == "FCM_RESOURCE_EXHAUSTED" || w.reason == "HTTP_429"; got.RateLimited != rate {
		t.Fatalf("outcome = %+v, want RateLimited %v (a refusal for the rate slows the shared limit)", got, rate)
	}
	if got.Class != w.class || got.Reason != w.reason || got.DeadDestination != w.dead || got.RetryAfter != w.retryAfter {
		t.Fatalf("outcome = %+v, want class %v reason %q dead %v retry-after %v", got, w.class, w.reason, w.dead, w.retryAfter)
	}
}

func TestSendSpeaksFCMv1(t *testing.T) {
	t.Parallel()
	p, fk := setup(t)
	out := p.Send(context.Background(), message("m-1"))
	check(t, out, want{class: provider.Accepted})
	if out.ProviderRef != "projects/proj-1/messages/0:1%abc" {
		t.Errorf("ProviderRef = %q, want FCM's name", out.ProviderRef)
	}
	got := fk.sent()
	if len(got) != 1 {
		t.Fatalf("FCM saw %d sends, want 1", len(got))
	}
	if got[0].proto != 2 {
		t.Errorf("sent over HTTP/%d, want HTTP/2", got[0].proto)
	}
	b, _ := json.Marshal(got[0].body)
	const body = `{"message":{"data":{"kind":"payment.paid","message_id":"m-1"},` +
		`"notification":{"body":"Paid 5,000 won","title":"Payment received"},"token":"device-token-m-1"}}`
	if string(b) != body {
		t.Errorf("body = %s\nwant   %s", b, body)
	}

	t.Run("DataOnlyWithoutTitleOrBody", func(t *testing.T) {
		m := message("m-2")
		m.Title, m.Body, m.Kind = "", "", ""
		check(t, p.Send(context.Background(), m), want{class: provider.Accepted})
		b, _ := json.Marshal(fk.sent()[1].body)
		if string(b) != `{"message":{"data":{"message_id":"m-2"},"token":"device-token-m-2"}}` {
			t.Errorf("body = %s", b)
		}
	})
	t.Run("NoAddressIsPermanentWithoutACall", func(t *testing.T) {
		m := message("m-3")
		m.Address = ""
		check(t, p.Send(context.Background(), m), want{class: provider.Permanent, reason: "FCM_NO_TOKEN"})
		if _, sends := fk.counts(); sends != 2 {
			t.Errorf("FCM saw %d sends, want 2", sends)
		}
	})
}

// TestClassification walks the package doc's table: each row is answered
// by the fake FCM over HTTP/2 and goes through Send.
func TestClassification(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC) // the fake clock's time
	rows := []struct {
		name       string
		code       int
		retryAfter string
		body       string
		want       want
		ref        string
	}{
		{name: "2xx name", code: 200, body: `{"name": "projects/proj-1/messages/123"}`,
			want: want{class: provider.Accepted}, ref: "projects/proj-1/messages/123"},
		{name: "2xx unreadable body is still accepted", code: 200, body: `<html>`,
			want: want{class: provider.Accepted}},
		{name: "404 UNREGISTERED", code: 404, body: errorBody(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."),
			want: want{class: provider.Permanent, reason: "FCM_UNREGISTERED", dead: true}},
		{name: "400 INVALID_ARGUMENT errorCode", code: 400, body: errorBody(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
			want: want{class: provider.Permanent, reason: "FCM_INVALID_ARGUMENT"}},
		{name: "400 INVALID_ARGUMENT status only", code: 400, body: errorBody(400, "INVALID_ARGUMENT", "", "Request contains an invalid argument."),
			want: want{class: provider.Permanent, reason: "FCM_INVALID_ARGUMENT"}},
		{name: "403 SENDER_ID_MISMATCH", code: 403, body: errorBody(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"),
			want: want{class: provider.Permanent, reason: "FCM_SENDER_ID_MISMATCH"}},
		{name: "404 NOT_FOUND without UNREGISTERED", code: 404, body: errorBody(404, "NOT_FOUND", "", "Requested entity was not found."),
			want: want{class: provider.Permanent, reason: "FCM_NOT_FOUND"}},
		{name: "429 QUOTA_EXCEEDED Retry-After seconds", code: 429, retryAfter: "30", body: errorBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
			want: want{class: provider.NotSent, reason: "FCM_QUOTA_EXCEEDED", retryAfter: 30 * time.Second}},
		{name: "429 QUOTA_EXCEEDED Retry-After date", code: 429, retryAfter: at.Add(90 * time.Second).Format(http.TimeFormat), body: errorBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
			want: want{class: provider.NotSent, reason: "FCM_QUOTA_EXCEEDED", retryAfter: 90 * time.Second}},
		{name: "429 QUOTA_EXCEEDED no Retry-After", code: 429, body: errorBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
			want: want{class: provider.NotSent, reason: "FCM_QUOTA_EXCEEDED"}},
		{name: "429 RESOURCE_EXHAUSTED", code: 429, retryAfter: "7", body: errorBody(429, "RESOURCE_EXHAUSTED", "", "Quota exceeded."),
			want: want{class: provider.NotSent, reason: "FCM_RESOURCE_EXHAUSTED", retryAfter: 7 * time.Second}},
		{name: "401 THIRD_PARTY_AUTH_ERROR", code: 401, body: errorBody(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "Auth error from APNS or Web Push Service"),
			want: want{class: provider.NotSent, reason: "FCM_THIRD_PARTY_AUTH_ERROR"}},
		{name: "401 APNS_AUTH_ERROR", code: 401, body: errorBody(401, "UNAUTHENTICATED", "APNS_AUTH_ERROR", "Auth error from APNS"),
			want: want{class: provider.NotSent, reason: "FCM_THIRD_PARTY_AUTH_ERROR"}},
		{name: "401 UNAUTHENTICATED", code: 401, body: errorBody(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."),
			want: want{class: provider.NotSent, reason: "FCM_UNAUTHENTICATED"}},
		{name: "401 any other", code: 401, body: ``,
			want: want{class: provider.NotSent, reason: "FCM_UNAUTHENTICATED"}},
		{name: "403 PERMISSION_DENIED", code: 403, body: errorBody(403, "PERMISSION_DENIED", "", "Permission 'cloudmessaging.messages.create' denied"),
			want: want{class: provider.NotSent, reason: "FCM_PERMISSION_DENIED"}},
		{name: "503 UNAVAILABLE", code: 503, retryAfter: "10", body: errorBody(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."),
			want: want{class: provider.Unknown, reason: "FCM_UNAVAILABLE"}},
		{name: "500 INTERNAL", code: 500, body: errorBody(500, "INTERNAL", "INTERNAL", "Internal error encountered."),
			want: want{class: provider.Unknown, reason: "FCM_INTERNAL"}},
		{name: "other 5xx", code: 502, body: `<!DOCTYPE html><title>Error 502 (Server Error)!!1</title>`,
			want: want{class: provider.Unknown, reason: "HTTP_502"}},
		{name: "other 5xx with a status of another code", code: 504, body: errorBody(504, "UNAVAILABLE", "", "Deadline"),
			want: want{class: provider.Unknown, reason: "HTTP_504"}},
		{name: "3xx is answered, not followed", code: 302,
			want: want{class: provider.Unknown, reason: "HTTP_302"}},
		{name: "other 4xx 413", code: 413, want: want{class: provider.Permanent, reason: "HTTP_413"}},
		{name: "other 4xx 410 is not dead", code: 410, want: want{class: provider.Permanent, reason: "HTTP_410"}},
		{name: "other 4xx 403", code: 403, want: want{class: provider.NotSent, reason: "HTTP_403"}},
		{name: "other 4xx 409", code: 409, want: want{class: provider.Unknown, reason: "HTTP_409"}},
		{name: "other 4xx unknown errorCode", code: 400, body: errorBody(400, "FAILED_PRECONDITION", "SOMETHING_NEW", "?"),
			want: want{class: provider.Permanent, reason: "HTTP_400"}},
		{name: "other 4xx FcmError code under another @type", code: 404,
			body: `{"error": {"code": 404, "status": "NOT_FOUND", "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "errorCode": "UNREGISTERED"}]}}`,
			want: want{class: provider.Permanent, reason: "FCM_NOT_FOUND"}},
		{name: "a code with another HTTP status: UNREGISTERED 500", code: 500, body: errorBody(500, "FAILED_PRECONDITION", "UNREGISTERED", "?"),
			want: want{class: provider.Unknown, reason: "HTTP_500"}},
		{name: "a code with another HTTP status: UNREGISTERED 400 is not dead", code: 400, body: errorBody(400, "FAILED_PRECONDITION", "UNREGISTERED", "?"),
			want: want{class: provider.Permanent, reason: "HTTP_400"}},
		{name: "a code with another HTTP status: QUOTA_EXCEEDED 503", code: 503, retryAfter: "5", body: errorBody(503, "FAILED_PRECONDITION", "QUOTA_EXCEEDED", "?"),
			want: want{class: provider.Unknown, reason: "HTTP_503"}},
		{name: "a code with another HTTP status: then the status's own", code: 500, body: errorBody(500, "INTERNAL", "UNREGISTERED", "?"),
			want: want{class: provider.Unknown, reason: "FCM_INTERNAL"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			p, fk := setup(t)
			fk.setSendAnswer(func(w http.ResponseWriter, r *http.Request) {
				if row.retryAfter != "" {
					w.Header().Set("Retry-After", row.retryAfter)
				}
				if row.code/100 == 3 {
					w.Header().Set("Location", sendPath)
				}
				w.WriteHeader(row.code)
				io.WriteString(w, row.body)
			})
			out := p.Send(context.Background(), message("m-1"))
			check(t, out, row.want)
			if out.ProviderRef != row.ref {
				t.Errorf("ProviderRef = %q, want %q", out.ProviderRef, row.ref)
			}
			if _, sends := fk.counts(); sends != 1 {
				t.Errorf("FCM saw %d sends, want 1 (nothing followed or replayed)", sends)
			}
		})
	}
}

// TestClassificationTransport holds the transport rows of the table.
func TestClassificationTransport(t *testing.T) {
	t.Parallel()
	t.Run("ConnectionRefusedBeforeWritten", func(t *testing.T) {
		t.Parallel()
		p, _ := setupWith(t, func(cfg *fcm.Config) {
			cfg.Endpoint = "https://" + httpcalltest.ClosedAddr(t)
		})
		check(t, p.Send(context.Background(), message("m-1")), want{class: provider.NotSent, reason: "CONNECTION_REFUSED"})
	})
	t.Run("TLSFailureBeforeWritten", func(t *testing.T) {
		t.Parallel()
		p, fk := setupWith(t, func(cfg *fcm.Config) {
			// The fake's certificate names example.com and 127.0.0.1, not localhost.
			cfg.Endpoint = strings.Replace(cfg.Endpoint, "127.0.0.1", "localhost", 1)
		})
		check(t, p.Send(context.Background(), message("m-1")), want{class: provider.NotSent, reason: "TLS_FAILURE"})
		if _, sends := fk.counts(); sends != 0 {
			t.Errorf("FCM saw %d sends, want 0", sends)
		}
	})
	t.Run("StreamResetAfterWritten", func(t *testing.T) {
		t.Parallel()
		p, fk := setup(t)
		fk.setSendAnswer(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
		out := p.Send(context.Background(), message("m-1"))
		if out.Class != provider.Unknown || (out.Reason != "CONNECTION_RESET" && out.Reason != "TRANSPORT_ERROR") {
			t.Fatalf("outcome = %+v, want unknown (reset)", out)
		}
	})
	t.Run("TimeoutAfterWritten", func(t *testing.T) {
		t.Parallel()
		p, fk := setupWith(t, func(cfg *fcm.Config) {
			// The call's own Timeout, on the wall clock: a first send opens the
			// connection and caches the token, so the second has only its
			// request to write in that second.
			cfg.Timeout = time.Second
		})
		check(t, p.Send(context.Background(), message("m-1")), want{class: provider.Accepted})
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		fk.setSendAnswer(func(w http.ResponseWriter, r *http.Request) { httpcalltest.Hang(r, stop) })
		check(t, p.Send(context.Background(), message("m-2")), want{class: provider.Unknown, reason: "TIMEOUT"})
		if _, sends := fk.counts(); sends != 2 {
			t.Errorf("FCM saw %d sends, want 2", sends)
		}
	})
}

// TestNoTokenIsNotSent holds the rows where no access token could be had:
// nothing reaches FCM.
func TestNoTokenIsNotSent(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name   string
		answer func(w http.ResponseWriter, n int)
		reason string
	}{
		{"TokenEndpointRefuses", func(w http.ResponseWriter, _ int) {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid grant: account not found"}`)
		}, "FCM_AUTH_REFUSED"},
		{"TokenEndpoint401", func(w http.ResponseWriter, _ int) { w.WriteHeader(401) }, "FCM_AUTH_REFUSED"},
		{"TokenEndpoint5xx", func(w http.ResponseWriter, _ int) { w.WriteHeader(503) }, "FCM_AUTH_FAILED"},
		{"AnswerWithoutToken", func(w http.ResponseWriter, _ int) { io.WriteString(w, `{"expires_in":3599}`) }, "FCM_AUTH_FAILED"},
		{"AnswerWithoutExpiry", func(w http.ResponseWriter, _ int) { io.WriteString(w, `{"access_token":"ya29.x"}`) }, "FCM_AUTH_FAILED"},
		{"AnswerNotBearer", func(w http.ResponseWriter, _ int) {
			io.WriteString(w, `{"access_token":"ya29.x","expires_in":3599,"token_type":"MAC"}`)
		}, "FCM_AUTH_FAILED"},
		{"AnswerNotJSON", func(w http.ResponseWriter, _ int) { io.WriteString(w, `<html>`) }, "FCM_AUTH_FAILED"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			p, fk := setup(t)
			fk.setTokenAnswer(row.answer)
			check(t, p.Send(context.Background(), message("m-1")), want{class: provider.NotSent, reason: row.reason})
			if tokens, sends := fk.counts(); tokens != 1 || sends != 0 {
				t.Errorf("token requests %d, sends %d; want 1 and 0", tokens, sends)
			}
		})
	}
	t.Run("TokenEndpointUnreachable", func(t *testing.T) {
		t.Parallel()
		p, fk := setupWith(t, func(cfg *fcm.Config) {
			cfg.TokenURL = "http://127.0.0.1:1/token"
		})
		check(t, p.Send(context.Background(), message("m-1")), want{class: provider.NotSent, reason: "FCM_AUTH_FAILED"})
		if tokens, sends := fk.counts(); tokens != 0 || sends != 0 {
			t.Errorf("token requests %d, sends %d; want 0 and 0", tokens, sends)
		}
	})
	t.Run("DeadlineWhileWaiting", func(t *testing.T) {
		t.Parallel()
		p, fk := setup(t)
		arrived, release := fk.hold()
		defer close(release)
		ctx, cancel := context.WithCancel(context.Background())
		fcm.SetTokenHooks(p, cancel, nil) // the caller gives up once it waits
		check(t, p.Send(ctx, message("m-1")), want{class: provider.NotSent, reason: "FCM_AUTH_TIMEOUT"})
		testenv.Recv(t, arrived, "token request")
		if _, sends := fk.counts(); sends != 0 {
			t.Errorf("FCM saw %d sends, want 0", sends)
		}
	})
}

// sendAll sends n messages at once and returns their outcomes.
func sendAll(p *fcm.FCM, n int) <-chan provider.Outcome {
	out := make(chan provider.Outcome, n)
	for i := range n {
		go func() { out <- p.Send(context.Background(), message("m-"+string(rune('a'+i%26)))) }()
	}
	return out
}

// sendWaiting sends n messages at once and returns when all n wait on a
// token refresh (the token endpoint must be held).
func sendWaiting(t *testing.T, p *fcm.FCM, n int32) <-chan provider.Outcome {
	t.Helper()
	var waiting atomic.Int32
	allWaiting := make(chan struct{})
	fcm.SetTokenHooks(p, func() {
		if waiting.Add(1) == n {
			close(allWaiting)
		}
	}, nil)
	outs := sendAll(p, int(n))
	testenv.Recv(t, allWaiting, "all sends waiting on the token")
	return outs
}

func TestConcurrentSendsShareOneTokenRequest(t *testing.T) {
	t.Parallel()
	const n = 40
	p, fk := setup(t)
	arrived, release := fk.hold()
	outs := sendWaiting(t, p, n)
	testenv.Recv(t, arrived, "token request")
	close(release)
	for range n {
		check(t, testenv.Recv(t, outs, "outcome"), want{class: provider.Accepted})
	}
	if tokens, sends := fk.counts(); tokens != 1 || sends != n {
		t.Fatalf("token requests %d, sends %d; want 1 and %d", tokens, sends, n)
	}
	for _, s := range fk.sent() {
		if s.bearer != "ya29.access-token-1" {
			t.Fatalf("send with token %q", s.bearer)
		}
	}
}

func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	p, fk := setup(t)
	refreshed := make(chan struct{}, 8)
	check(t, p.Send(context.Background(), message("m-1")), want{class: provider.Accepted})

	t.Run("OutsideTheWindowTheCachedTokenServes", func(t *testing.T) {
		fk.clock.Advance(54 * time.Minute) // 6 minutes left
		check(t, p.Send(context.Background(), message("m-2")), want{class: provider.Accepted})
		if tokens, _ := fk.counts(); tokens != 1 {
			t.Fatalf("token requests %d, want 1", tokens)
		}
	})
	t.Run("InsideTheWindowOneRefreshRunsAndNobodyWaits", func(t *testing.T) {
		fk.clock.Advance(2 * time.Minute) // 4 minutes left
		arrived, release := fk.hold()
		fcm.SetTokenHooks(p, func() { t.Error("a send waited although its token was still valid") },
			func() { refreshed <- struct{}{} })
		outs := sendAll(p, 10)
		for range 10 {
			check(t, testenv.Recv(t, outs, "outcome"), want{class: provider.Accepted})
		}
		testenv.Recv(t, arrived, "the refresh's token request")
		close(release)
		testenv.Recv(t, refreshed, "the refresh's end")
		fcm.SetTokenHooks(p, nil, nil)
		if tokens, _ := fk.counts(); tokens != 2 {
			t.Fatalf("token requests %d, want 2 (one refresh for ten sends)", tokens)
		}
		for _, s := range fk.sent()[2:] {
			if s.bearer != "ya29.access-token-1" {
				t.Fatalf("a send during the refresh used %q, want the cached token", s.bearer)
			}
		}
	})
	t.Run("TheNewTokenServesNext", func(t *testing.T) {
		check(t, p.Send(context.Background(), message("m-3")), want{class: provider.Accepted})
		all := fk.sent()
		if got := all[len(all)-1].bearer; got != "ya29.access-token-2" {
			t.Fatalf("send after the refresh used %q", got)
		}
		if tokens, _ := fk.counts(); tokens != 2 {
			t.Fatalf("token requests %d, want 2", tokens)
		}
	})
}

func TestExpiredTokenIsNotUsed(t *testing.T) {
	t.Parallel()
	p, fk := setup(t)
	check(t, p.Send(context.Background(), message("m-1")), want{class: provider.Accepted})
	fk.clock.Advance(tokenLife)
	var waited atomic.Bool
	fcm.SetTokenHooks(p, func() { waited.Store(true) }, nil)
	check(t, p.Send(context.Background(), message("m-2")), want{class: provider.Accepted})
	if !waited.Load() {
		t.Error("the send did not wait for a new token")
	}
	if got := fk.sent()[1].bearer; got != "ya29.access-token-2" {
		t.Fatalf("send after expiry used %q", got)
	}
}

func TestFailedRefreshFailsItsWaitersAndTheNextCallTriesAgain(t *testing.T) {
	t.Parallel()
	const n = 10
	p, fk := setup(t)
	fk.setTokenAnswer(func(w http.ResponseWriter, _ int) { w.WriteHeader(500) })
	arrived, release := fk.hold()
	outs := sendWaiting(t, p, n)
	close(release)
	for range n {
		check(t, testenv.Recv(t, outs, "outcome"), want{class: provider.NotSent, reason: "FCM_AUTH_FAILED"})
	}
	<-arrived
	if tokens, sends := fk.counts(); tokens != 1 || sends != 0 {
		t.Fatalf("token requests %d, sends %d; want 1 and 0", tokens, sends)
	}

	fk.setTokenAnswer(nil)
	fcm.SetTokenHooks(p, nil, nil)
	check(t, p.Send(context.Background(), message("m-1")), want{class: provider.Accepted})
	if tokens, sends := fk.counts(); tokens != 2 || sends != 1 {
		t.Fatalf("token requests %d, sends %d; want 2 and 1", tokens, sends)
	}
}

func TestUnauthenticatedDropsTheCachedToken(t *testing.T) {
	t.Parallel()
	p, fk := setup(t)
	check(t, p.Send(context.Background(), message("m-1")), want{class: provider.Accepted})

	t.Run("ThirdPartyAuthErrorKeepsIt", func(t *testing.T) {
		fk.setSendAnswer(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, 401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR")
		})
		check(t, p.Send(context.Background(), message("m-2")), want{class: provider.NotSent, reason: "FCM_THIRD_PARTY_AUTH_ERROR"})
		if tokens, _ := fk.counts(); tokens != 1 {
			t.Fatalf("token requests %d, want 1", tokens)
		}
	})
	t.Run("UnauthenticatedDropsIt", func(t *testing.T) {
		fk.setSendAnswer(func(w http.ResponseWriter, _ *http.Request) { writeError(w, 401, "UNAUTHENTICATED", "") })
		check(t, p.Send(context.Background(), message("m-3")), want{class: provider.NotSent, reason: "FCM_UNAUTHENTICATED"})
		fk.setSendAnswer(nil)
		check(t, p.Send(context.Background(), message("m-4")), want{class: provider.Accepted})
		all := fk.sent()
		if tokens, _ := fk.counts(); tokens != 2 || all[len(all)-1].bearer != "ya29.access-token-2" {
			t.Fatalf("token requests %d, last bearer %q: want a new token after the 401", tokens, all[len(all)-1].bearer)
		}
	})
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	good := keyFile("https://oauth2.googleapis.com/token")
	edit := func(f func(m map[string]string)) []byte {
		var m map[string]string
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	rows := []struct {
		name string
		cfg  fcm.Config
		err  string
	}{
		{"NoKeyFile", fcm.Config{}, "fcm: service_account: empty"},
		{"NotJSON", fcm.Config{ServiceAccountJSON: []byte(`{"private_key": "x",`)}, "fcm: service_account: not a JSON key file"},
		{"NotAServiceAccount", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { m["type"] = "authorized_user" })}, "type is not service_account"},
		{"NoProject", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { delete(m, "project_id") })}, "project_id missing"},
		{"NoEmail", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { delete(m, "client_email") })}, "client_email missing"},
		{"NoKey", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { delete(m, "private_key") })}, "private_key missing"},
		{"KeyNotPEM", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { m["private_key"] = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" })}, "private_key is not an RSA key"},
		{"BadTokenURI", fcm.Config{ServiceAccountJSON: edit(func(m map[string]string) { m["token_uri"] = "oauth2.googleapis.com/token" })}, "token_uri: not an http(s) URL"},
		{"BadEndpoint", fcm.Config{ServiceAccountJSON: good, Endpoint: "fcm.googleapis.com"}, "fcm: endpoint: not an http(s) URL"},
		{"BadTokenURL", fcm.Config{ServiceAccountJSON: good, TokenURL: "ftp://x/token"}, "fcm: token_url: not an http(s) URL"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			_, err := fcm.New(row.cfg)
			if err == nil || !strings.Contains(err.Error(), row.err) {
				t.Fatalf("New: %v, want an error with %q", err, row.err)
			}
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		if _, err := fcm.New(fcm.Config{ServiceAccountJSON: good}); err != nil {
			t.Fatal(err)
		}
		c := fcm.Config{}.WithDefaults()
		if c.Endpoint != fcm.DefaultEndpoint || c.Timeout != fcm.DefaultTimeout || c.Clock == nil {
			t.Fatalf("WithDefaults = %+v", c)
		}
	})
}

// reasonCode is what every reason must look like: a code, no free text.
var reasonCode = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// TestSecretsNeverInErrorsOrReasons feeds a failure from every path that
// has a secret at hand (the private key, an assertion, an access token)
// with answers that echo it, and looks for it in every error and reason.
func TestSecretsNeverInErrorsOrReasons(t *testing.T) {
	t.Parallel()
	keyLines := func() []string {
		var lines []string
		for _, l := range strings.Split(keyPEM(), "\n") {
			if len(l) > 16 && !strings.HasPrefix(l, "-----") {
				lines = append(lines, l)
			}
		}
		return lines
	}()
	var mu sync.Mutex
	var secrets []string // assertions and access tokens seen on the wire
	leaks := func(t *testing.T, what, s string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		// Any 12 characters of a secret in a row count: a truncated or
		// partly quoted secret leaks as well.
		for _, secret := range append(append([]string(nil), secrets...), keyLines...) {
			for i := 0; i+12 <= len(secret); i += 4 {
				if strings.Contains(s, secret[i:i+12]) {
					t.Errorf("%s carries a secret: %q", what, s)
					return
				}
			}
		}
	}

	t.Run("New", func(t *testing.T) {
		pemKey := keyPEM()
		broken := []string{
			`{"type":"service_account","private_key":` + jsonString(pemKey) + `,"project_id":}`,
			`{"type":"service_account","project_id":"p","client_email":"e","private_key":"` + keyLines[2] + `"}`,
			`{"type":"service_account","project_id":"p","client_email":"e","private_key":` + jsonString(strings.Replace(pemKey, "PRIVATE KEY", "PRIVATE KEE", 1)) + `}`,
			`{"type":"user ` + keyLines[1] + `","private_key":` + jsonString(pemKey) + `}`,
			"\x00" + keyLines[0],
		}
		for i, b := range broken {
			_, err := fcm.New(fcm.Config{ServiceAccountJSON: []byte(b)})
			if err == nil {
				t.Fatalf("key file %d accepted", i)
			}
			leaks(t, "New's error", err.Error())
		}
	})

	echo := func(w http.ResponseWriter, r *http.Request) string {
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		secrets = append(secrets, bearer)
		mu.Unlock()
		return bearer
	}
	answers := map[string]http.HandlerFunc{
		"401 echoing the token": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(401)
			io.WriteString(w, errorBody(401, "UNAUTHENTICATED", "", "bad token "+echo(w, r)))
		},
		"400 with the token as errorCode": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(400)
			io.WriteString(w, errorBody(400, echo(w, r), echo(w, r), "x"))
		},
		"429 with the token as Retry-After": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", echo(w, r))
			w.WriteHeader(429)
		},
		"500 echoing the token": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			io.WriteString(w, errorBody(500, "INTERNAL", "INTERNAL", echo(w, r)))
		},
		"reset after written": func(w http.ResponseWriter, r *http.Request) { echo(w, r); panic(http.ErrAbortHandler) },
	}
	for name, answer := range answers {
		t.Run("Send "+name, func(t *testing.T) {
			t.Parallel()
			p, fk := setup(t)
			fk.setSendAnswer(answer)
			out := p.Send(context.Background(), message("m-1"))
			if !reasonCode.MatchString(out.Reason) {
				t.Errorf("reason %q is not a code", out.Reason)
			}
			leaks(t, "reason", out.Reason)
		})
	}
	tokenAnswers := map[string]func(w http.ResponseWriter, assertion string){
		"400 echoing the assertion": func(w http.ResponseWriter, a string) {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"bad `+a+`"}`)
		},
		"200 with a broken body": func(w http.ResponseWriter, a string) { io.WriteString(w, `{"access_token":"`+a) },
		"500 echoing the assertion": func(w http.ResponseWriter, a string) {
			w.WriteHeader(500)
			io.WriteString(w, a)
		},
	}
	for name, answer := range tokenAnswers {
		t.Run("Token "+name, func(t *testing.T) {
			t.Parallel()
			p, fk := setup(t)
			fk.setTokenAnswer(func(w http.ResponseWriter, _ int) {
				fk.mu.Lock()
				a := fk.assertions[len(fk.assertions)-1]
				fk.mu.Unlock()
				mu.Lock()
				secrets = append(secrets, a)
				mu.Unlock()
				answer(w, a)
			})
			out := p.Send(context.Background(), message("m-1"))
			if out.Class != provider.NotSent || !reasonCode.MatchString(out.Reason) {
				t.Errorf("outcome %+v: want not sent with a code", out)
			}
			leaks(t, "reason", out.Reason)
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

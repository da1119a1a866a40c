package bizppurio

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

// Test credentials. The secrets carry a marker the leak test looks for.
const (
	testAccount  = "herald_api"
	testPassword = "pw-SECRET-7f3a9c"
	testCBToken  = "cb-SECRET-0123456789abcdef"
	testFrom     = "02-1234-5678"
	testSender   = "senderkey-1"
	tokenPrefix  = "at-SECRET-"
)

// start is the fake clock's start: tokens the fake mints expire a day
// after it, as the vendor's do.
var start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// vendor is a fake Bizppurio WebAPI speaking the documented protocol:
// POST /v1/token with basic auth, POST /v3/message with the bearer token.
type vendor struct {
	srv *httptest.Server

	mu       sync.Mutex
	asked    int       // token requests, answered or not
	minted   int       // tokens issued
	valid    string    // the last token issued
	validExp time.Time // the expiry valid was issued with
	expired  time.Time // the expiry the next token is answered with
	// reissue makes a token request answer the last token again, not a
	// new one, while expired has not changed since it was issued.
	reissue  bool
	messages []sentMessage // every /v3/message request
	// tokenAnswer and messageAnswer replace the normal answers when set.
	tokenAnswer   http.HandlerFunc
	messageAnswer http.HandlerFunc
}

// sentMessage is one message request as the fake received it.
type sentMessage struct {
	Auth        string
	ContentType string
	Body        []byte
}

func newVendor(t *testing.T) *vendor {
	v := &vendor{expired: start.Add(24 * time.Hour)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/token", v.token)
	mux.HandleFunc("POST /v3/message", v.message)
	v.srv = httptest.NewUnstartedServer(mux)
	v.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS failure tests' handshake noise
	v.srv.StartTLS()
	t.Cleanup(v.srv.Close)
	return v
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (v *vendor) token(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	v.asked++
	override := v.tokenAnswer
	v.mu.Unlock()
	if override != nil {
		override(w, r)
		return
	}
	v.issue(w, r)
}

// issue is the vendor's normal answer to a token request.
func (v *vendor) issue(w http.ResponseWriter, r *http.Request) {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(testAccount+":"+testPassword))
	if r.Header.Get("Authorization") != want {
		writeJSON(w, http.StatusBadRequest, `{"code":3001,"description":"invalid basic authentication"}`)
		return
	}
	v.mu.Lock()
	if !v.reissue || v.valid == "" || !v.expired.Equal(v.validExp) {
		v.minted++
		v.valid, v.validExp = fmt.Sprintf("%s%d", tokenPrefix, v.minted), v.expired
	}
	tok, exp := v.valid, v.expired.In(kst).Format("20060102150405")
	v.mu.Unlock()
	writeJSON(w, http.StatusOK, fmt.Sprintf(`{"accesstoken":%q,"type":"Bearer","expired":%q}`, tok, exp))
}

func (v *vendor) message(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	v.messages = append(v.messages, sentMessage{Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type"), Body: body})
	n, valid, override := len(v.messages), v.valid, v.messageAnswer
	v.mu.Unlock()
	if override != nil {
		override(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+valid {
		writeJSON(w, http.StatusBadRequest, `{"code":3002,"description":"invalid token"}`)
		return
	}
	var req struct {
		RefKey string `json:"refkey"`
	}
	_ = json.Unmarshal(body, &req)
	writeJSON(w, http.StatusOK, fmt.Sprintf(`{"code":1000,"description":"Success","refkey":%q,"messagekey":"mk-%d"}`, req.RefKey, n))
}

func (v *vendor) setToken(h http.HandlerFunc) {
	v.mu.Lock()
	v.tokenAnswer = h
	v.mu.Unlock()
}

func (v *vendor) setMessage(h http.HandlerFunc) {
	v.mu.Lock()
	v.messageAnswer = h
	v.mu.Unlock()
}

// counts is how many tokens were issued and messages received.
func (v *vendor) counts() (tokens, messages int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.minted, len(v.messages)
}

// tokenRequests is how many token requests the vendor received, refused
// ones included.
func (v *vendor) tokenRequests() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.asked
}

func (v *vendor) lastMessage(t *testing.T) sentMessage {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.messages) == 0 {
		t.Fatal("the vendor received no message")
	}
	return v.messages[len(v.messages)-1]
}

// testConfig is a valid configuration pointed at v.
func testConfig(v *vendor, clk clock.Clock) Config {
	return Config{
		BaseURL: v.srv.URL, Account: testAccount, Password: testPassword, From: testFrom,
		SenderKey: testSender, Templates: map[string]string{"order_paid": "TPL_PAID"},
		CallbackToken: testCBToken, Timeout: 5 * time.Second, Clock: clk, Client: v.srv.Client(),
	}
}

// setup is an adapter talking to a fresh fake vendor, on a fake clock.
func setup(t *testing.T) (*Bizppurio, *vendor, *clock.Fake) {
	t.Helper()
	v := newVendor(t)
	clk := clock.NewFake(start)
	b, err := New(testConfig(v, clk))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b, v, clk
}

// A herald message id is "ntf_" + 26 characters + "." + channel.
const testNotification = "ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE"

func smsMessage(body string) provider.Message {
	return provider.Message{
		MessageID: testNotification + ".sms", Recipient: "r1", Kind: "order_paid",
		Channel: heraldtype.ChannelSMS, Address: "010-1234-5678", Title: "주문 안내", Body: body,
	}
}

func atMessage(body string) provider.Message {
	m := smsMessage(body)
	m.MessageID, m.Channel = testNotification+".alimtalk", heraldtype.ChannelAlimTalk
	return m
}

package bizppurio

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
)

// TestSecretsNeverLeak feeds the adapter a failure from every path and
// checks that no outcome reason and no error carries a secret: the
// password, its basic-auth form, an access token, the callback token. The
// fake vendor echoes the secrets in its error descriptions, as a careless
// server might.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	basic := base64.StdEncoding.EncodeToString([]byte(testAccount + ":" + testPassword))
	leaks := func(s string) bool {
		return strings.Contains(s, "SECRET") || strings.Contains(s, basic) || strings.Contains(s, testPassword)
	}
	var said []string // every reason and error message produced
	echo := fmt.Sprintf(`"description":"password %s token %s1 callback %s"`, testPassword, tokenPrefix, testCBToken)

	send := func(cfg func(*Config), token, message http.HandlerFunc, m provider.Message) {
		v := newVendor(t)
		c := testConfig(v, nil)
		c.Timeout = 300 * time.Millisecond
		if cfg != nil {
			cfg(&c)
		}
		b, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if token != nil {
			v.setToken(token)
		}
		if message != nil {
			v.setMessage(message)
		}
		o := b.Send(context.Background(), m)
		said = append(said, o.Reason, o.ProviderRef)
	}
	ok := smsMessage("hello")
	for _, c := range []int{2000, 3000, 3001, 3002, 3005, 3007, 3008, 3011, 5001, 5002, 9000, 4285} {
		body := fmt.Sprintf(`{"code":%d,%s}`, c, echo)
		send(nil, nil, answerWith(400, nil, body), ok)
		send(nil, answerWith(400, nil, body), nil, ok)
	}
	for _, s := range []int{200, 302, 401, 429, 500} {
		send(nil, nil, answerWith(s, nil, `{`+echo+`}`), ok)
		send(nil, answerWith(s, nil, `{`+echo+`}`), nil, ok)
	}
	send(nil, nil, hang, ok)
	send(nil, nil, hangUp, ok)
	send(nil, hang, nil, ok)
	send(nil, hangUp, nil, ok)
	send(func(c *Config) { c.BaseURL = "https://127.0.0.1:1" }, nil, nil, ok)
	send(func(c *Config) { c.Client = &http.Client{} }, nil, nil, ok)
	for _, m := range []provider.Message{smsMessage("😀"), smsMessage(""), atMessage(strings.Repeat("a", 1001))} {
		send(nil, nil, nil, m)
	}

	// Configuration errors, with every secret set.
	v := newVendor(t)
	for _, edit := range []func(*Config){
		func(c *Config) { c.Account = "" },
		func(c *Config) { c.Account = "a:" + testPassword },
		func(c *Config) { c.From = testPassword },
		func(c *Config) { c.BaseURL = "ftp://" + testPassword },
		func(c *Config) { c.CallbackToken = "SECRET" },
		func(c *Config) { c.SenderKey = "" },
		func(c *Config) { c.Templates = map[string]string{"k": ""} },
	} {
		c := testConfig(v, nil)
		edit(&c)
		if _, err := New(c); err != nil {
			said = append(said, err.Error())
		} else {
			t.Fatal("New accepted a bad configuration")
		}
	}

	// Refused reports: a wrong token (itself secret-looking) and bad bodies.
	b, _, _ := setup(t)
	for _, r := range []struct{ token, body string }{
		{"cb-SECRET-wrong-wrong-wrong", `{"RESULT":"4100","REFKEY":"x"}`},
		{"", `{}`},
		{testCBToken, `{"RESULT":"` + testPassword + `","REFKEY":"x"}`},
		{testCBToken, `not json ` + testCBToken},
	} {
		if _, err := b.ParseCallback(callback(r.token, r.body), []byte(r.body)); err != nil {
			said = append(said, err.Error())
		} else {
			t.Fatal("ParseCallback accepted a bad report")
		}
	}

	if len(said) < 60 {
		t.Fatalf("only %d reasons and errors collected", len(said))
	}
	for _, s := range said {
		if leaks(s) {
			t.Errorf("a secret leaked: %q", s)
		}
	}
}

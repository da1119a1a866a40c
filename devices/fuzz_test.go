package devices

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/heraldhq/herald/store"
)

var deviceIDForm = regexp.MustCompile(`^d[0-9a-f]{16}$`)

// FuzzDeviceToken: a path token is taken exactly when it is 1..MaxTokenLen
// bytes of printable UTF-8, and its device id is always "d" and 16 hex
// digits; any other token is a 400 problem naming the token.
func FuzzDeviceToken(f *testing.F) {
	for _, seed := range []string{"fcm-token:APA91b", "", "a/b c?d", "tok\x00en", "\xff", strings.Repeat("t", MaxTokenLen), strings.Repeat("t", MaxTokenLen+1), strings.Repeat("é", MaxTokenLen/2+1)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		r := httptest.NewRequest(http.MethodPut, "/", nil)
		r.SetPathValue("token", token)
		w := httptest.NewRecorder()
		got, ok := pathToken(w, r)
		printable := utf8.ValidString(token) && !strings.ContainsFunc(token, func(c rune) bool { return c < 0x20 || c == 0x7f })
		want := token != "" && len(token) <= MaxTokenLen && printable
		if ok != want {
			t.Fatalf("pathToken(%q) ok = %v, want %v", token, ok, want)
		}
		if ok {
			if got != token || w.Body.Len() != 0 {
				t.Fatalf("pathToken(%q) = %q and wrote %q", token, got, w.Body.String())
			}
			if id := store.DeviceID("t", "r", token); !deviceIDForm.MatchString(id) {
				t.Fatalf("DeviceID = %q", id)
			}
			return
		}
		var p struct {
			Status int    `json:"status"`
			Param  string `json:"param"`
		}
		if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Status != http.StatusBadRequest || p.Param != "token" {
			t.Fatalf("pathToken(%q) answered %d %s %s", token, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
	})
}

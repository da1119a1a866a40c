package app

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

// A webhook entry's ca_file is trusted for its receiver's certificate, as
// an smtp entry's is: a receiver with a self-signed certificate is
// reached with it, and refused (TLS_FAILURE, not sent) without it.
func TestWebhookCAFileTrustsTheReceiversCertificate(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	caFile := filepath.Join(t.TempDir(), "receiver.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	entry := config.Provider{Name: "hooks", Type: "webhook", Channel: "webhook", URL: ts.URL}
	msg := provider.Message{MessageID: "ntf_1.webhook", Recipient: "user-1", Kind: "k", Channel: heraldtype.ChannelWebhook}
	send := func(t *testing.T, p config.Provider) provider.Outcome {
		t.Helper()
		impl, err := (&App{}).newProvider(0, p)
		if err != nil {
			t.Fatalf("newProvider: %v", err)
		}
		return impl.Send(context.Background(), msg)
	}

	t.Run("WithCAFileIsAccepted", func(t *testing.T) {
		p := entry
		p.CAFile = caFile
		if out := send(t, p); out.Class != provider.Accepted {
			t.Fatalf("outcome = %+v, want accepted", out)
		}
	})
	t.Run("WithoutCAFileIsNotSent", func(t *testing.T) {
		if out := send(t, entry); out.Class != provider.NotSent || out.Reason != "TLS_FAILURE" {
			t.Fatalf("outcome = %+v, want not sent, TLS_FAILURE", out)
		}
	})
	t.Run("AnUnreadableCAFileStopsTheStart", func(t *testing.T) {
		p := entry
		p.CAFile = filepath.Join(t.TempDir(), "missing.pem")
		_, err := (&App{}).newProvider(0, p)
		if err == nil || !strings.Contains(err.Error(), "providers[0].ca_file") {
			t.Fatalf("newProvider = %v, want an error naming providers[0].ca_file", err)
		}
	})
}

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

func TestSIGTERMFinishesTheSendInFlight(t *testing.T) {
	t.Parallel()
	inCall := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	sinkSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(inCall) })
		<-release
		w.WriteHeader(http.StatusOK)
	}))
	defer sinkSrv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	dbPath := filepath.Join(t.TempDir(), "herald.db")
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, cfg, fmt.Sprintf(`listen: %s
database: sqlite:%s
api_keys: [{key: k, tenant: t}]
providers: [{name: sink, type: webhook, channel: webhook, url: %s, timeout: 5s}]
kinds:
  - {name: ping, category: transactional, channels: [webhook], templates: {webhook: {title: "t", body: "b"}}}
`, addr, dbPath, sinkSrv.URL))
	srv := newServer(t, cfg, addr)
	srv.start()
	c := newClient(addr, "k")
	id, err := c.post(context.Background(), "term-1", map[string]any{"recipient": "r", "event_id": "e", "kind": "ping"})
	if err != nil {
		t.Fatal(err)
	}
	<-inCall
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The provider call is still in flight: herald must wait for it.
	select {
	case <-srv.done:
		t.Fatalf("herald exited with a provider call in flight:\n%s", srv.tail())
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		srv.kill()
		t.Fatal("herald did not exit within 30 s of SIGTERM")
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, srv.tail())
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var state string
	if err := db.QueryRow(`SELECT state FROM deliveries WHERE notification_id = ?`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "PROVIDER_ACCEPTED" {
		t.Fatalf("delivery state after drain: %s", state)
	}
}

package bizppurio

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
)

func mustAccept(t *testing.T, b *Bizppurio) {
	t.Helper()
	if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.Accepted {
		t.Fatalf("send = %+v, want Accepted", o)
	}
}

func wantCounts(t *testing.T, v *vendor, tokens, messages int) {
	t.Helper()
	if gt, gm := v.counts(); gt != tokens || gm != messages {
		t.Fatalf("vendor saw %d tokens and %d messages, want %d and %d", gt, gm, tokens, messages)
	}
}

func TestTokenCache(t *testing.T) {
	t.Parallel()

	t.Run("OneTokenServesManySends", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(22*time.Hour + 59*time.Minute)
		mustAccept(t, b)
		wantCounts(t, v, 1, 2)
	})

	t.Run("RenewedAnHourBeforeExpiry", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(23*time.Hour + time.Minute)
		v.mu.Lock()
		v.expired = clk.Now().Add(24 * time.Hour)
		v.mu.Unlock()
		mustAccept(t, b)
		wantCounts(t, v, 2, 2)
		if got := v.lastMessage(t).Auth; got != "Bearer "+tokenPrefix+"2" {
			t.Fatalf("sent with %q, want the renewed token", got)
		}
		clk.Advance(22 * time.Hour)
		mustAccept(t, b)
		wantCounts(t, v, 2, 3)
	})

	t.Run("FailedRenewalKeepsTheValidToken", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(23*time.Hour + 30*time.Minute)
		v.setToken(answerWith(500, nil, ``))
		mustAccept(t, b)
		if got := v.lastMessage(t).Auth; got != "Bearer "+tokenPrefix+"1" {
			t.Fatalf("sent with %q, want the old token", got)
		}
	})

	t.Run("ExpiredTokenIsNotUsed", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(24 * time.Hour)
		v.setToken(answerWith(400, nil, `{"code":3009}`))
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.NotSent || o.Reason != "TOKEN_BIZPPURIO_3009" {
			t.Fatalf("send = %+v, want NotSent TOKEN_BIZPPURIO_3009", o)
		}
		wantCounts(t, v, 1, 1)
	})

	// A token the vendor refuses (3002) is dropped and the send goes
	// again at once with a fresh token: accepted by the one call, no
	// attempt and retry wait spent on the token (the vendor took nothing).
	t.Run("RefusedTokenIsDroppedAndTheSendGoesAgain", func(t *testing.T) {
		t.Parallel()
		b, v, _ := setup(t)
		mustAccept(t, b)
		v.mu.Lock()
		v.valid = "revoked" // the vendor no longer takes token 1
		v.mu.Unlock()
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.Accepted {
			t.Fatalf("send = %+v, want accepted with a fresh token", o)
		}
		wantCounts(t, v, 2, 3)
		wantSentWith(t, v, 2)
	})

	// A fresh token refused too: the send ends not sent (3002), after one
	// more try, not a loop.
	t.Run("RefusedFreshTokenEndsNotSent", func(t *testing.T) {
		t.Parallel()
		b, v, _ := setup(t)
		mustAccept(t, b)
		v.setMessage(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusBadRequest, `{"code":3002,"description":"invalid token"}`)
		})
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.NotSent || o.Reason != "BIZPPURIO_3002" {
			t.Fatalf("send = %+v, want NotSent BIZPPURIO_3002", o)
		}
		wantCounts(t, v, 2, 3)
	})
}

func wantTokenRequests(t *testing.T, v *vendor, want int) {
	t.Helper()
	if got := v.tokenRequests(); got != want {
		t.Fatalf("vendor saw %d token requests, want %d", got, want)
	}
}

func wantSentWith(t *testing.T, v *vendor, token int) {
	t.Helper()
	if got, want := v.lastMessage(t).Auth, fmt.Sprintf("Bearer %s%d", tokenPrefix, token); got != want {
		t.Fatalf("sent with %q, want %q", got, want)
	}
}

// TestTokenRenewalAtMostOnceAMinute: inside the renewal window a valid
// token is renewed once, then not again for renewEvery, whatever the
// renewal brought: a vendor that re-issues the same expiry (or refuses)
// must not cost every send a token request. An expired token is replaced
// at once.
func TestTokenRenewalAtMostOnceAMinute(t *testing.T) {
	t.Parallel()

	t.Run("ReissuedWithTheSameExpiry", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		// In the window; the vendor keeps answering the first token's
		// expiry.
		clk.Advance(23*time.Hour + 10*time.Minute)
		for range 20 {
			mustAccept(t, b)
		}
		wantTokenRequests(t, v, 2)
		wantSentWith(t, v, 2)
		clk.Advance(renewEvery - time.Second)
		mustAccept(t, b)
		wantTokenRequests(t, v, 2)
		clk.Advance(time.Second)
		mustAccept(t, b)
		wantTokenRequests(t, v, 3)
		wantCounts(t, v, 3, 23)
	})

	t.Run("FailedRenewal", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(23*time.Hour + 10*time.Minute)
		v.setToken(answerWith(429, map[string]string{"RateLimit-Reset": "1"}, `{"code":5002}`))
		for range 10 {
			mustAccept(t, b)
		}
		wantTokenRequests(t, v, 2)
		wantSentWith(t, v, 1)
		clk.Advance(renewEvery)
		mustAccept(t, b)
		wantTokenRequests(t, v, 3)
	})

	t.Run("ExpiredTokenIsReplacedAtOnce", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		mustAccept(t, b)
		clk.Advance(24*time.Hour - 30*time.Second)
		mustAccept(t, b) // renewed, to the same expiry
		wantTokenRequests(t, v, 2)
		clk.Advance(30 * time.Second) // expired, well within renewEvery
		v.mu.Lock()
		v.expired = clk.Now().Add(24 * time.Hour)
		v.mu.Unlock()
		mustAccept(t, b)
		wantTokenRequests(t, v, 3)
		wantSentWith(t, v, 3)
	})

	t.Run("ConcurrentSends", func(t *testing.T) {
		t.Parallel()
		b, v, clk := setup(t)
		// The same token again: sends still using it while the renewal
		// is under way are not refused.
		v.reissue = true
		mustAccept(t, b)
		clk.Advance(23*time.Hour + 10*time.Minute)
		const senders, each = 8, 5
		var wg sync.WaitGroup
		outcomes := make([]provider.Outcome, senders*each)
		for i := range senders {
			wg.Go(func() {
				for j := range each {
					outcomes[i*each+j] = b.Send(context.Background(), smsMessage("hello"))
				}
			})
		}
		wg.Wait()
		for i, o := range outcomes {
			if o.Class != provider.Accepted {
				t.Fatalf("send %d = %+v", i, o)
			}
		}
		wantTokenRequests(t, v, 2)
	})
}

// TestTokenOneRefreshInFlight: twenty sends that find no token make one
// token request; nineteen wait for it.
func TestTokenOneRefreshInFlight(t *testing.T) {
	t.Parallel()
	b, v, _ := setup(t)
	const senders = 20
	release := make(chan struct{})
	var waiting atomic.Int32
	b.tokens.onWait = func() {
		if waiting.Add(1) == senders-1 {
			close(release)
		}
	}
	v.setToken(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
			t.Error("the waiters never all arrived")
		}
		v.issue(w, r)
	})
	var wg sync.WaitGroup
	outcomes := make([]provider.Outcome, senders)
	for i := range senders {
		wg.Go(func() { outcomes[i] = b.Send(context.Background(), smsMessage("hello")) })
	}
	wg.Wait()
	for i, o := range outcomes {
		if o.Class != provider.Accepted {
			t.Fatalf("send %d = %+v", i, o)
		}
	}
	wantCounts(t, v, 1, senders)
}

// holdToken makes v's next token request wait: entered closes when it
// arrives, and it is answered when release is closed.
func holdToken(v *vendor) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	v.setToken(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		v.issue(w, r)
	})
	return entered, release
}

// TestTokenRenewalDoesNotStall: while one send renews the token, another
// sends with the old one, still valid, instead of waiting.
func TestTokenRenewalDoesNotStall(t *testing.T) {
	t.Parallel()
	b, v, clk := setup(t)
	mustAccept(t, b)
	clk.Advance(23*time.Hour + 10*time.Minute)
	entered, release := holdToken(v)
	renewer := make(chan provider.Outcome)
	go func() { renewer <- b.Send(context.Background(), smsMessage("renewer")) }()
	<-entered
	mustAccept(t, b)
	if got := v.lastMessage(t).Auth; got != "Bearer "+tokenPrefix+"1" {
		t.Fatalf("the second send used %q, want the old token", got)
	}
	close(release)
	if o := <-renewer; o.Class != provider.Accepted {
		t.Fatalf("renewing send = %+v", o)
	}
	if got := v.lastMessage(t).Auth; got != "Bearer "+tokenPrefix+"2" {
		t.Fatalf("the renewing send used %q, want the new token", got)
	}
}

// TestTokenWaiterGivesUp: a send waiting for another's token request
// stops when its own context ends, NotSent.
func TestTokenWaiterGivesUp(t *testing.T) {
	t.Parallel()
	b, v, _ := setup(t)
	entered, release := holdToken(v)
	leader := make(chan provider.Outcome)
	go func() { leader <- b.Send(context.Background(), smsMessage("leader")) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	b.tokens.onWait = cancel
	waiter := make(chan provider.Outcome)
	go func() { waiter <- b.Send(ctx, smsMessage("waiter")) }()
	select {
	case o := <-waiter:
		if o.Class != provider.NotSent || o.Reason != "TOKEN_WAIT_CANCELED" {
			t.Errorf("waiter = %+v, want NotSent TOKEN_WAIT_CANCELED", o)
		}
	case <-time.After(10 * time.Second):
		t.Error("the waiter did not give up with its context")
	}
	close(release)
	if o := <-leader; o.Class != provider.Accepted {
		t.Fatalf("leader = %+v", o)
	}
}

func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC) // 09:00 in Korea
	rows := []struct {
		name, expired string
		want          time.Time
	}{
		{"KoreanWallClock", "20260303085959", time.Date(2026, 3, 2, 23, 59, 59, 0, time.UTC)},
		{"Missing", "", now.Add(tokenLifetime)},
		{"Garbage", "tomorrow", now.Add(tokenLifetime)},
		{"AlreadyPast", "20260301090000", now.Add(tokenLifetime)},
		{"TooFarAhead", "20260310090000", now.Add(tokenLifetime)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			if got := tokenExpiry(row.expired, now); !got.Equal(row.want) {
				t.Fatalf("tokenExpiry(%q) = %v, want %v", row.expired, got, row.want)
			}
		})
	}
}

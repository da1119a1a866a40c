package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/apns"
	"github.com/heraldhq/herald/provider/bizppurio"
	"github.com/heraldhq/herald/provider/fcm"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/provider/smtp"
	"github.com/heraldhq/herald/provider/twilio"
	"github.com/heraldhq/herald/provider/webhook"
	"github.com/heraldhq/herald/settle"
)

// buildProviders makes one adapter per configured provider (or takes the
// one Options gives for its name), registers it for its channel, and notes
// which take delivery reports and which answer status look-ups.
func (a *App) buildProviders(cfg *config.Config, opts Options) error {
	a.registry = provider.NewRegistry()
	a.receivers = map[string]provider.CallbackReceiver{}
	a.checkers = map[string]provider.StatusChecker{}
	a.closers = map[string]interface{ Close() error }{}
	for i, p := range cfg.Providers {
		impl, ok := opts.Providers[p.Name]
		if !ok {
			var err error
			if impl, err = a.newProvider(i, p); err != nil {
				return err
			}
		}
		if r, ok := impl.(provider.CallbackReceiver); ok {
			a.receivers[p.Name] = r
		}
		if c, ok := impl.(provider.StatusChecker); ok {
			if s, isSim := impl.(*sim.Sim); !isSim || s.Lookups() {
				a.checkers[p.Name] = c
			}
		}
		if c, ok := impl.(interface{ Close() error }); ok && opts.Providers[p.Name] == nil {
			a.closers[p.Name] = c
		}
		// The non-production allow-list's own layer wraps the sends only.
		if platform := config.ProviderPlatform(p); platform != "" {
			a.registry.RegisterPlatform(heraldtype.Channel(p.Channel), platform, p.Name, a.guardProvider(p, impl))
		} else {
			a.registry.Register(heraldtype.Channel(p.Channel), p.Name, a.guardProvider(p, impl))
		}
	}
	return nil
}

// newProvider builds the adapter of the i-th provider entry. Its
// credentials were read by config.Load; an error names the entry's key and
// never holds a credential.
func (a *App) newProvider(i int, p config.Provider) (provider.Provider, error) {
	key := fmt.Sprintf("config: providers[%d]", i)
	cred := func(k string) ([]byte, error) {
		v := p.Read(k)
		if v == nil {
			return nil, fmt.Errorf("%s.%s: not read (credentials are read by config.Load)", key, k)
		}
		return v, nil
	}
	wrap := func(impl provider.Provider, err error) (provider.Provider, error) {
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", key, p.Type, err)
		}
		return impl, nil
	}
	timeout := p.Timeout.D()
	switch p.Type {
	case "webhook":
		var keys [][]byte
		if p.Secret != "" {
			k, err := webhook.ParseSecret(p.Secret)
			if err != nil {
				return nil, fmt.Errorf("%s.secret: %w", key, err)
			}
			keys = append(keys, k)
		}
		for j := range p.Secrets {
			raw, err := cred(fmt.Sprintf("secrets[%d]", j))
			if err != nil {
				return nil, err
			}
			k, err := webhook.ParseSecret(string(raw))
			if err != nil {
				return nil, fmt.Errorf("%s.secrets[%d]: %w", key, j, err)
			}
			keys = append(keys, k)
		}
		wc := webhook.Config{URL: p.URL, Timeout: timeout, Secrets: keys}
		if p.CAFile != "" {
			pool, err := readCAFile(key, p.CAFile)
			if err != nil {
				return nil, err
			}
			wc.RootCAs = pool
		}
		if err := wc.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		return webhook.New(wc), nil
	case "sim":
		s := sim.New(sim.Config{Latency: p.Latency.D(), NotSent: p.Faults.NotSent, Permanent: p.Faults.Permanent, Unknown: p.Faults.Unknown,
			DeadAddresses: p.Faults.DeadAddresses, ReportAfter: p.ReportAfter.D(), ReportFailed: p.ReportFailed,
			StatusLookup: p.StatusLookup})
		a.sims[p.Name] = s
		return s, nil
	case "fcm":
		sa, err := cred("credentials")
		if err != nil {
			return nil, err
		}
		return wrap(fcm.New(fcm.Config{ServiceAccountJSON: sa, Endpoint: p.Endpoint, Timeout: timeout, Clock: a.clock}))
	case "apns":
		k, err := cred("key")
		if err != nil {
			return nil, err
		}
		return wrap(apns.New(apns.Config{KeyP8: k, KeyID: p.KeyID, TeamID: p.TeamID, Topic: p.Topic, Endpoint: p.Endpoint,
			Timeout: timeout, Priority: p.Priority, TTL: p.TTL.D(), CollapseID: p.CollapseID, CollapseByKind: p.CollapseByKind,
			MaxConns: p.MaxConns, Clock: a.clock}))
	case "smtp":
		var pw []byte
		if p.Username != "" {
			var err error
			if pw, err = cred("password"); err != nil {
				return nil, err
			}
		}
		tlsCfg := smtp.TLS{InsecurePlaintext: p.Plaintext}
		if p.CAFile != "" {
			pool, err := readCAFile(key, p.CAFile)
			if err != nil {
				return nil, err
			}
			tlsCfg.RootCAs = pool
		}
		return wrap(smtp.New(smtp.Config{Addr: p.Addr, Username: p.Username, Password: string(pw), From: p.From,
			Domain: p.Domain, TLS: tlsCfg, Timeout: timeout}))
	case "bizppurio":
		pw, err := cred("password")
		if err != nil {
			return nil, err
		}
		return wrap(bizppurio.New(bizppurio.Config{BaseURL: p.Endpoint, Account: p.Account, Password: string(pw), From: p.From,
			SenderKey: p.SenderKey, Templates: p.Templates, CallbackToken: string(p.Read("callback_token")), Timeout: timeout, Clock: a.clock}))
	case "twilio":
		tok, err := cred("auth_token")
		if err != nil {
			return nil, err
		}
		return wrap(twilio.New(twilio.Config{BaseURL: p.Endpoint, AccountSID: p.AccountSID, AuthToken: string(tok), From: p.From,
			MessagingServiceSID: p.MessagingServiceSID, CallbackURL: p.CallbackURL, Timeout: timeout}))
	}
	return nil, fmt.Errorf("%s.type: %q has no adapter", key, p.Type)
}

// closeProviders closes the adapters that hold connections of their own
// (APNs' HTTP/2 pool), once the sends have ended.
func (a *App) closeProviders() {
	if a.stopSimReports != nil {
		a.stopSimReports()
	}
	for name, c := range a.closers {
		if err := c.Close(); err != nil {
			a.logger.Warn("herald: close provider", slog.String("provider", name), slog.Any("error", err))
		}
	}
}

// simReportTries bounds how often a simulated delivery report is brought
// again while its send is still SENDING (the sender has not recorded the
// call's answer yet), a second apart.
const simReportTries = 10

// wireSimReports makes each simulator's delivery reports reach the store
// as a provider's callback would.
// The reports live until closeProviders: a report whose timer fires
// after it (the simulator's timers are not stopped) is dropped, as a
// provider's callback to a herald that is down would be, and leaves the
// delivery as it was (PROVIDER_ACCEPTED or UNKNOWN, both ended).
func (a *App) wireSimReports() {
	ctx, stop := context.WithCancel(context.Background())
	a.stopSimReports = stop
	for name, s := range a.sims {
		s.SetReporter(func(r provider.Report) {
			for range simReportTries {
				if ctx.Err() != nil {
					return
				}
				_, err := settle.Apply(ctx, a.store, a.metrics, a.alerts, name, metrics.ReportCallback, r)
				if !errors.Is(err, settle.ErrNotYet) {
					if err != nil && ctx.Err() == nil {
						a.logger.LogAttrs(ctx, slog.LevelWarn, "sim: delivery report not applied",
							slog.String("provider", name), slog.String("message_id", r.MessageID), slog.Any("error", err))
					}
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
}

// readCAFile reads the PEM certificates of an entry's ca_file (key names
// the entry in the error) into a pool that replaces the system's roots.
func readCAFile(key, path string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(path)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s.ca_file: no PEM certificate could be read from %s", key, path)
	}
	return pool, nil
}

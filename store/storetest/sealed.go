package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
)

// sealRing is a keyring of the ids given, the first sealing.
func sealRing(t *testing.T, ids ...string) *seal.Keyring {
	t.Helper()
	var keys []seal.Key
	for _, id := range ids {
		keys = append(keys, seal.Key{ID: id, Secret: []byte(strings.Repeat(id+"-secret-", 8))})
	}
	k, err := seal.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sealedValues reads every value of every sealed field as the store holds
// it, by field and joined key.
func sealedValues(t *testing.T, b bundle, ss store.Sealed) map[store.SealedField]map[string]store.SealedValue {
	t.Helper()
	out := map[store.SealedField]map[string]store.SealedValue{}
	for _, f := range store.SealedFields {
		out[f] = map[string]store.SealedValue{}
		var after []string
		for {
			page, err := ss.SealedPage(b.ctx, store.SealedPageParams{Field: f, After: after, Limit: 2})
			if err != nil {
				t.Fatalf("SealedPage %s: %v", f, err)
			}
			if len(page) == 0 {
				break
			}
			for _, v := range page {
				if len(v.Key) != f.KeyLen() {
					t.Fatalf("%s: a key of %d values", f, len(v.Key))
				}
				k := strings.Join(v.Key, "|")
				if _, dup := out[f][k]; dup {
					t.Fatalf("%s: key %s listed twice by the pages", f, k)
				}
				out[f][k] = v
			}
			after = page[len(page)-1].Key
		}
	}
	return out
}

// testSealed: the re-encryption job over both stores. Every field that
// holds personal data is paged in key order and swapped compare-and-set;
// after a run every value is sealed with the current key and opens to what
// was written; a rotation re-seals it all; a run that finds nothing says
// zero; a write between a page and its swap is not overwritten; a run
// stopped half way and run again finishes the work; and a campaign's
// sealed params reach its notifications as they were sealed.
func testSealed(t *testing.T, h Harness) {
	const phone, email, token = "+821011112222", "minjun@example.com", "fcm-token-AAAA:APA91b"
	write := func(t *testing.T, b bundle) (store.Sealed, store.Campaigns, string) {
		t.Helper()
		ss, ok := b.s.(store.Sealed)
		if !ok {
			t.Skip("the store has no sealed fields")
		}
		cs, ok := b.s.(store.Campaigns)
		if !ok {
			t.Skip("the store keeps no campaigns")
		}
		if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", Language: "ko",
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: phone, heraldtype.ChannelEmail: email},
			Consent:   map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}}); err != nil {
			t.Fatal(err)
		}
		if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r-no-address", Language: "en"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: store.DeviceID("t1", "r1", token),
			Token: token, Platform: store.PlatformFCM}); err != nil {
			t.Fatal(err)
		}
		p, _ := create(t, b, func(p *store.NotificationCreateParams) {
			p.Params = json.RawMessage(`{"phone":"010-1111-2222"}`)
		})
		create(t, b, func(p *store.NotificationCreateParams) { p.Params = json.RawMessage(`{}`) })
		if _, err := cs.CampaignCreate(b.ctx, store.CampaignCreateParams{ID: "cmp_sealed", Tenant: "t2", IdempotencyKey: "cmp_sealed",
			RequestHash: "h", Kind: "coupon", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
			Params: json.RawMessage(`{"coupon":"C10-SECRET"}`),
			Recipients: []store.CampaignRecipient{
				{Recipient: "r-own", NotificationID: "ntf_sealed_own", Params: json.RawMessage(`{"coupon":"OWN-SECRET"}`)},
				{Recipient: "r-base", NotificationID: "ntf_sealed_base"},
			}}); err != nil {
			t.Fatal(err)
		}
		return ss, cs, p.ID
	}
	// plains is what each value must open to, by field and key.
	plains := func(nid string) map[store.SealedField]map[string]string {
		return map[store.SealedField]map[string]string{
			store.SealedNotificationParams:      {nid: `{"phone":"010-1111-2222"}`},
			store.SealedCampaignParams:          {"cmp_sealed": `{"coupon":"C10-SECRET"}`},
			store.SealedCampaignRecipientParams: {"cmp_sealed|r-own": `{"coupon":"OWN-SECRET"}`},
			store.SealedDeviceTokens:            {"t1|r1|" + store.DeviceID("t1", "r1", token): token},
			store.SealedProfiles:                {"t1|r1": phone + " " + email},
		}
	}
	// check opens every value with k and requires each personal one to be
	// sealed with k's current key and to open to what was written.
	check := func(t *testing.T, b bundle, ss store.Sealed, k *seal.Keyring, nid string) {
		t.Helper()
		got := sealedValues(t, b, ss)
		for f, want := range plains(nid) {
			for key, plain := range want {
				v, ok := got[f][key]
				if !ok {
					t.Fatalf("%s: no row %s", f, key)
				}
				var opened, id string
				switch f {
				case store.SealedDeviceTokens:
					o, err := k.Open(seal.Device, v.Tenant, v.Value)
					if err != nil {
						t.Fatalf("%s %s: %v", f, key, err)
					}
					opened, id = o, seal.KeyID(v.Value)
				case store.SealedProfiles:
					p, err := store.DecodeProfile(v.Tenant, "r1", []byte(v.Value), b.clk.Now())
					if err != nil {
						t.Fatal(err)
					}
					id = seal.KeyID(p.Addresses[heraldtype.ChannelSMS])
					if seal.KeyID(p.Addresses[heraldtype.ChannelEmail]) != id || p.Language != "ko" || !p.Consent[heraldtype.ChannelSMS] {
						t.Fatalf("profile after the run: %s (language, consent and both addresses under one key expected)", v.Value)
					}
					if err := seal.OpenMap(k, seal.Address, v.Tenant, p.Addresses); err != nil {
						t.Fatal(err)
					}
					opened = p.Addresses[heraldtype.ChannelSMS] + " " + p.Addresses[heraldtype.ChannelEmail]
				default:
					o, err := k.OpenJSON(v.Tenant, json.RawMessage(v.Value))
					if err != nil {
						t.Fatalf("%s %s: %v", f, key, err)
					}
					opened, id = string(o), seal.JSONKeyID(json.RawMessage(v.Value))
				}
				if id != k.Current() || opened != plain {
					t.Errorf("%s %s: stored %q (key %q) opens to %q; want key %q and %q", f, key, v.Value, id, opened, k.Current(), plain)
				}
				if strings.Contains(v.Value, "1111") || strings.Contains(v.Value, "SECRET") || strings.Contains(v.Value, "minjun") || strings.Contains(v.Value, "AAAA") {
					t.Errorf("%s %s: the stored value shows its plain text: %s", f, key, v.Value)
				}
			}
		}
		for key, v := range got[store.SealedNotificationParams] {
			if key != nid && v.Value != `{}` {
				t.Errorf("empty params became %s: nothing personal was there to seal", v.Value)
			}
		}
	}
	rekey := func(t *testing.T, b bundle, ss store.Sealed, k *seal.Keyring) map[store.SealedField]seal.FieldReport {
		t.Helper()
		reps, err := seal.Rekey(b.ctx, ss, k, seal.RekeyOptions{Page: 2})
		if err != nil {
			t.Fatalf("Rekey: %v", err)
		}
		out := map[store.SealedField]seal.FieldReport{}
		for _, r := range reps {
			out[r.Field] = r
		}
		if len(out) != len(store.SealedFields) {
			t.Fatalf("Rekey reported %d fields, want %d", len(out), len(store.SealedFields))
		}
		return out
	}
	sealedCounts := func(reps map[store.SealedField]seal.FieldReport) string {
		var parts []string
		for _, f := range store.SealedFields {
			parts = append(parts, fmt.Sprintf("%s=%d", f, reps[f].Sealed))
		}
		return strings.Join(parts, " ")
	}

	t.Run("RekeySealsEveryFieldThenRotates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ss, cs, nid := write(t, b)
		k1 := sealRing(t, "k1")
		// Plain rows (written before keys were configured) are sealed.
		const first = "profiles.data=1 devices.token=1 campaigns.params=1 campaign_recipients.params=1 notifications.params=1"
		if got := sealedCounts(rekey(t, b, ss, k1)); got != first {
			t.Fatalf("first run sealed %s, want %s", got, first)
		}
		check(t, b, ss, k1, nid)
		if got := sealedCounts(rekey(t, b, ss, k1)); !strings.Contains(got, "=0") || strings.Contains(got, "=1") {
			t.Fatalf("a second run with the same key sealed %s, want nothing", got)
		}
		// A rotation: k2 first, k1 still opens.
		k2 := sealRing(t, "k2", "k1")
		if got := sealedCounts(rekey(t, b, ss, k2)); got != first {
			t.Fatalf("the rotation sealed %s, want %s", got, first)
		}
		check(t, b, ss, k2, nid)
		// The store keeps the sealed values as they are: a profile read
		// gives them sealed, and they open with the ring.
		p, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil || seal.KeyID(p.Addresses[heraldtype.ChannelSMS]) != "k2" {
			t.Fatalf("ProfileGet after the rotation: %+v, %v", p.Addresses, err)
		}
		// A ring without k2 cannot read: counted under k2, not changed.
		k3 := sealRing(t, "k3")
		reps := rekey(t, b, ss, k3)
		for _, f := range store.SealedFields {
			if r := reps[f]; r.Unreadable != 1 || r.UnreadableKeys["k2"] != 1 || r.Sealed != 0 {
				t.Errorf("%s with a ring that lacks k2: %+v, want one unreadable under k2", f, r)
			}
		}
		check(t, b, ss, k2, nid)

		// The campaign's sealed params reach its notifications as sealed:
		// the fan-out copies them, the ring opens them for the tenant.
		if _, err := cs.CampaignStart(b.ctx, "t2", "cmp_sealed"); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: "t2", ID: "cmp_sealed", Limit: 10}); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(time.Second)
		got := map[string]string{}
		for _, r := range claim(t, b, heraldtype.LaneMarketing, 10) {
			o, err := k2.OpenJSON(r.Tenant, r.Params)
			if err != nil {
				t.Fatalf("the fanned-out params of %s do not open: %v", r.Recipient, err)
			}
			got[r.Recipient] = string(o)
		}
		if got["r-own"] != `{"coupon":"OWN-SECRET"}` || got["r-base"] != `{"coupon":"C10-SECRET"}` {
			t.Errorf("fanned-out params = %v", got)
		}
	})

	t.Run("SwapIsCompareAndSet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ss, _, _ := write(t, b)
		key := []string{"t1", "r1", store.DeviceID("t1", "r1", token)}
		n, err := ss.SealedSwap(b.ctx, store.SealedDeviceTokens, []store.SealedSwap{
			{Key: key, Old: "not-the-stored-token", New: "hs1:k1:x"},
		})
		if err != nil || n != 0 {
			t.Fatalf("a swap whose old value is not stored changed %d rows, err %v", n, err)
		}
		n, err = ss.SealedSwap(b.ctx, store.SealedDeviceTokens, []store.SealedSwap{{Key: key, Old: token, New: "hs1:k1:x"}})
		if err != nil || n != 1 {
			t.Fatalf("the matching swap changed %d rows, err %v", n, err)
		}
		if d, err := b.s.DeviceGet(b.ctx, "t1", "r1", key[2]); err != nil || d.Token != "hs1:k1:x" {
			t.Fatalf("DeviceGet after the swap: %q, %v", d.Token, err)
		}
	})

	t.Run("AWriteBetweenPageAndSwapStays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ss, _, _ := write(t, b)
		k1 := sealRing(t, "k1")
		const moved = "+821099998888"
		racing := &racingSealed{Sealed: ss, after: func(f store.SealedField) {
			if f != store.SealedProfiles {
				return
			}
			// The profile handler's write: sealed, as every write is.
			if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", Language: "ko",
				Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: k1.Seal(seal.Address, "t1", moved)}}); err != nil {
				t.Error(err)
			}
		}}
		reps, err := seal.Rekey(b.ctx, racing, k1, seal.RekeyOptions{Page: 10})
		if err != nil {
			t.Fatal(err)
		}
		if r := reps[0]; r.Field != store.SealedProfiles || r.Raced != 1 || r.Sealed != 0 {
			t.Fatalf("profiles: %+v, want the one raced row left to its writer", r)
		}
		p, err := b.s.ProfileGet(b.ctx, "t1", "r1")
		if err != nil {
			t.Fatal(err)
		}
		if err := seal.OpenMap(k1, seal.Address, "t1", p.Addresses); err != nil || p.Addresses[heraldtype.ChannelSMS] != moved || len(p.Addresses) != 1 {
			t.Fatalf("the profile written during the run became %v (%v), want the writer's %s", p.Addresses, err, moved)
		}
	})

	t.Run("AStoppedRunFinishesWhenRunAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ss, _, nid := write(t, b)
		for i := range 9 {
			if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t3", Recipient: fmt.Sprintf("r%02d", i),
				Addresses: map[heraldtype.Channel]string{heraldtype.ChannelEmail: fmt.Sprintf("p%02d@example.com", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		k1 := sealRing(t, "k1")
		ctx, cancel := context.WithCancel(b.ctx)
		pages := 0
		_, err := seal.Rekey(ctx, ss, k1, seal.RekeyOptions{Page: 3, Progress: func(r seal.FieldReport) {
			if pages++; pages == 2 {
				cancel() // as a kill between two pages would stop it
			}
		}})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the stopped run ended with %v, want context.Canceled", err)
		}
		reps := rekey(t, b, ss, k1)
		if r := reps[store.SealedProfiles]; r.Sealed != 11-6 || r.Current != 6 || r.Scanned != 11 {
			t.Fatalf("the second run's profiles: %+v, want the 5 the first run had not reached sealed and 6 left as they were", r)
		}
		check(t, b, ss, k1, nid)
		for _, v := range sealedValues(t, b, ss)[store.SealedProfiles] {
			if strings.Contains(v.Value, "@example.com") {
				t.Errorf("profile %v still holds a plain address: %s", v.Key, v.Value)
			}
		}
	})
}

// racingSealed calls after with the field once each page has been read,
// before the job swaps it: a write made there races the job.
type racingSealed struct {
	store.Sealed
	after func(store.SealedField)
}

func (r *racingSealed) SealedPage(ctx context.Context, p store.SealedPageParams) ([]store.SealedValue, error) {
	page, err := r.Sealed.SealedPage(ctx, p)
	if err == nil && len(page) > 0 {
		r.after(p.Field)
	}
	return page, err
}

package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

func hm(h, m int) time.Duration { return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute }

// A config file without quiet_hours holds marketing to the seed's window:
// 08:00–20:50 in Asia/Seoul, the dispatcher stopping ten minutes before.
func TestQuietHoursDefaults(t *testing.T) {
	t.Parallel()
	for name, load := range map[string]func() (*config.Config, error){
		"File": func() (*config.Config, error) { return config.Load(writeFile(t, minimal), noEnv) },
		"Dev":  func() (*config.Config, error) { return config.Load("", noEnv) },
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		def, tenants, err := c.QuietHoursRules()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !def.Enabled || def.Start != hm(8, 0) || def.End != hm(20, 50) || def.StopReleaseBefore != 10*time.Minute ||
			def.Zone.String() != "Asia/Seoul" || len(tenants) != 0 {
			t.Errorf("%s: quiet hours %+v, tenants %v; want 08:00–20:50 Asia/Seoul, stopping 10m before, no tenant", name, def, tenants)
		}
	}
}

// A tenant's window takes each key it sets and the top level's for the
// rest; enabled: false turns the rule off for it alone.
func TestQuietHoursPerTenant(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, minimal+`quiet_hours:
  start: "09:00"
  stop_release_before: 15m
  tenants:
    shop-us: {time_zone: America/New_York, end: "21:00"}
    night-owls: {start: "22:00", end: "00:00", stop_release_before: 0s}
    tools: {enabled: false}
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	def, tenants, err := c.QuietHoursRules()
	if err != nil {
		t.Fatal(err)
	}
	seoul, _ := time.LoadLocation("Asia/Seoul")
	ny, _ := time.LoadLocation("America/New_York")
	want := map[string]config.QuietHoursRule{
		"":           {Enabled: true, Start: hm(9, 0), End: hm(20, 50), StopReleaseBefore: 15 * time.Minute, Zone: seoul},
		"shop-us":    {Enabled: true, Start: hm(9, 0), End: hm(21, 0), StopReleaseBefore: 15 * time.Minute, Zone: ny},
		"night-owls": {Enabled: true, Start: hm(22, 0), End: 24 * time.Hour, Zone: seoul},
		"tools":      {},
	}
	tenants[""] = def
	if len(tenants) != len(want) {
		t.Fatalf("rules %v, want %v", tenants, want)
	}
	for name, w := range want {
		g := tenants[name]
		if g.Enabled != w.Enabled || g.Start != w.Start || g.End != w.End || g.StopReleaseBefore != w.StopReleaseBefore ||
			(w.Zone != nil) != (g.Zone != nil) || (w.Zone != nil && g.Zone.String() != w.Zone.String()) {
			t.Errorf("%q: %+v, want %+v", name, g, w)
		}
	}
}

// A bad value stops the start with a message naming its key.
func TestQuietHoursRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, key string }{
		{`quiet_hours: {start: "8:00"}`, "quiet_hours.start"},
		{`quiet_hours: {start: "24:00"}`, "quiet_hours.start"},
		{`quiet_hours: {end: "20:60"}`, "quiet_hours.end"},
		{`quiet_hours: {end: "24:01"}`, "quiet_hours.end"},
		{`quiet_hours: {end: "noon"}`, "quiet_hours.end"},
		{`quiet_hours: {start: "08:00", end: "08:00"}`, "quiet_hours:"},
		{`quiet_hours: {start: "00:00", end: "24:00"}`, "quiet_hours:"},
		{`quiet_hours: {time_zone: Mars/Olympus}`, "quiet_hours.time_zone"},
		{`quiet_hours: {time_zone: Local}`, "quiet_hours.time_zone"},
		{`quiet_hours: {start: "20:00", end: "20:50", stop_release_before: 50m}`, "quiet_hours.stop_release_before"},
		{`quiet_hours: {stop_release_before: -1m}`, "quiet_hours.stop_release_before"},
		{`quiet_hours: {tenants: {shop: {time_zone: Nowhere}}}`, "quiet_hours.tenants.shop.time_zone"},
		{`quiet_hours: {tenants: {shop: {start: "20:45"}}}`, "quiet_hours.tenants.shop.stop_release_before"},
		{`quiet_hours: {tenants: {shop: {window: "08-20"}}}`, "window"},
	} {
		_, err := config.Load(writeFile(t, minimal+c.yaml+"\n"), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.key)
		}
	}
	// enabled: false needs no valid window keys left over.
	if _, err := config.Load(writeFile(t, minimal+`quiet_hours: {enabled: false, start: "08:00", end: "08:00"}`+"\n"), noEnv); err != nil {
		t.Errorf("quiet hours turned off: %v", err)
	}
}

// start and end bound when marketing may go: a window that lets it go
// at night (21:00–08:00), as one written as the quiet hours themselves
// does, is named at start; the default window and one ending at 21:00 are
// not.
func TestQuietHoursWarnOfAWindowAtNight(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, minimal+`quiet_hours:
  tenants:
    clinic: {start: "21:00", end: "08:00"}
    early: {start: "07:30"}
    shop-us: {time_zone: America/New_York, end: "21:00"}
    late: {end: "00:00"}
    tools: {enabled: false}
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.QuietHoursWarnings(), "\n")
	for _, want := range []string{
		"quiet_hours.tenants.clinic: marketing may go from 21:00 to 08:00",
		"quiet_hours.tenants.early: marketing may go from 07:30 to 20:50",
		"quiet_hours.tenants.late: marketing may go from 08:00 to 24:00",
		`quiet hours of 21:00 to 08:00 are start: "08:00", end: "21:00"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %q, want one with %q", got, want)
		}
	}
	for _, not := range []string{"quiet_hours:", "shop-us", "tools"} {
		if strings.Contains(got, not) {
			t.Errorf("warnings %q name %s", got, not)
		}
	}
	if n := len(c.QuietHoursWarnings()); n != 3 {
		t.Errorf("%d warnings, want 3", n)
	}
}

package config

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "time/tzdata" // the default Asia/Seoul loads on a machine with no zoneinfo

	"github.com/heraldhq/herald/validate"
)

// QuietHours is when marketing may be sent: a window of the day on the
// recipient's wall clock (package quiethours). A tenant may have a window
// of its own.
//
//	quiet_hours:
//	  start: "08:00"
//	  end: "20:50"
//	  time_zone: Asia/Seoul
//	  stop_release_before: 10m
//	  tenants:
//	    shop-us: {time_zone: America/New_York}
//	    internal-tools: {enabled: false}
type QuietHours struct {
	QuietHoursWindow `yaml:",inline"`
	// Tenants gives a tenant its own window: each key it sets replaces
	// the one above, each it leaves out is the one above. Defaults to none.
	Tenants map[string]QuietHoursWindow `yaml:"tenants"`
}

// QuietHoursWindow is one window's keys.
type QuietHoursWindow struct {
	// Enabled holds marketing outside the window; false sends it at any
	// hour. Defaults to true.
	Enabled *bool `yaml:"enabled"`
	// Start is the time of day, "HH:MM" on the recipient's wall clock,
	// from which marketing may be sent. Defaults to "08:00".
	Start string `yaml:"start"`
	// End is the time of day until which marketing may be sent ("24:00"
	// or "00:00" is midnight); an end before start runs the window across
	// midnight.
	// Defaults to "20:50".
	End string `yaml:"end"`
	// TimeZone is the IANA time zone of the recipients whose profile
	// names none. Defaults to Asia/Seoul.
	TimeZone string `yaml:"time_zone"`
	// StopReleaseBefore is how long before end the dispatcher (transport
	// db) stops releasing marketing, deferring it to the next opening, so
	// that nothing it released is still on its way at end. Defaults to 10
	// minutes.
	StopReleaseBefore *Duration `yaml:"stop_release_before"`
}

// QuietHoursRule is one tenant's quiet hours, resolved and parsed.
type QuietHoursRule struct {
	// Enabled false: the tenant's marketing goes at any hour, and the
	// other fields are not set.
	Enabled bool
	// Start and End are times of day: Start in [0, 24h), End in (0, 24h].
	Start, End        time.Duration
	StopReleaseBefore time.Duration
	Zone              *time.Location
}

func (c *Config) quietHoursDefaults() {
	q := &c.QuietHours
	if q.Enabled == nil {
		on := true
		q.Enabled = &on
	}
	if q.Start == "" {
		q.Start = "08:00"
	}
	if q.End == "" {
		q.End = "20:50"
	}
	if q.TimeZone == "" {
		q.TimeZone = "Asia/Seoul"
	}
	if q.StopReleaseBefore == nil {
		d := Duration(10 * time.Minute)
		q.StopReleaseBefore = &d
	}
}

func (c *Config) validateQuietHours() error {
	if _, err := c.QuietHours.resolve("quiet_hours", QuietHoursWindow{}); err != nil {
		return err
	}
	tenants := make([]string, 0, len(c.QuietHours.Tenants))
	for t := range c.QuietHours.Tenants {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		if t == "" {
			return fmt.Errorf("config: quiet_hours.tenants: a tenant name is empty")
		}
		if _, err := c.QuietHours.resolve("quiet_hours.tenants."+t, c.QuietHours.Tenants[t]); err != nil {
			return err
		}
	}
	return nil
}

// QuietHoursRules returns the quiet hours of every tenant that quiet_hours.
// tenants does not name, and of each it names. Call it on a config that
// validated.
func (c *Config) QuietHoursRules() (QuietHoursRule, map[string]QuietHoursRule, error) {
	def, err := c.QuietHours.resolve("quiet_hours", QuietHoursWindow{})
	if err != nil {
		return QuietHoursRule{}, nil, err
	}
	tenants := map[string]QuietHoursRule{}
	for t, w := range c.QuietHours.Tenants {
		if tenants[t], err = c.QuietHours.resolve("quiet_hours.tenants."+t, w); err != nil {
			return QuietHoursRule{}, nil, err
		}
	}
	return def, tenants, nil
}

// QuietHoursWarnings name each window (the top level's, then each tenant's
// of quiet_hours.tenants) that lets marketing go at night, 21:00 to 08:00
// on the recipient's clock, when Korean law (and the US TCPA) keeps
// advertising quiet: start and end bound when marketing may go, so a
// reader who wrote the quiet hours themselves (start 21:00, end 08:00)
// sends marketing only at night. Call it on a config that validated.
func (c *Config) QuietHoursWarnings() []string {
	def, tenants, err := c.QuietHoursRules()
	if err != nil {
		return nil
	}
	var out []string
	check := func(key string, r QuietHoursRule) {
		if !r.Enabled || !r.atNight() {
			return
		}
		out = append(out, fmt.Sprintf("%s: marketing may go from %s to %s on the recipient's clock, which includes the night "+
			"(21:00 to 08:00, when the law keeps advertising quiet): start and end bound when marketing may go, "+
			"so quiet hours of 21:00 to 08:00 are start: \"08:00\", end: \"21:00\"", key, clockOf(r.Start), clockOf(r.End)))
	}
	check("quiet_hours", def)
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		check("quiet_hours.tenants."+t, tenants[t])
	}
	return out
}

// atNight reports whether the window lets marketing go at some time of
// the night, 21:00 to 08:00.
func (r QuietHoursRule) atNight() bool {
	const morning, evening = 8 * time.Hour, 21 * time.Hour
	if r.End <= r.Start { // across midnight
		return true
	}
	return r.Start < morning || r.End > evening
}

// clockOf writes a time of day as "HH:MM".
func clockOf(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

// resolve parses the window made of over's keys, the top level's for the
// keys over leaves out; key names it in errors.
func (q QuietHours) resolve(key string, over QuietHoursWindow) (QuietHoursRule, error) {
	w := q.QuietHoursWindow
	if over.Enabled != nil {
		w.Enabled = over.Enabled
	}
	if over.Start != "" {
		w.Start = over.Start
	}
	if over.End != "" {
		w.End = over.End
	}
	if over.TimeZone != "" {
		w.TimeZone = over.TimeZone
	}
	if over.StopReleaseBefore != nil {
		w.StopReleaseBefore = over.StopReleaseBefore
	}
	if w.Enabled != nil && !*w.Enabled {
		return QuietHoursRule{}, nil
	}
	r := QuietHoursRule{Enabled: true}
	var err error
	if r.Start, err = timeOfDay(w.Start, false); err != nil {
		return QuietHoursRule{}, fmt.Errorf("config: %s.start: %w", key, err)
	}
	if r.End, err = timeOfDay(w.End, true); err != nil {
		return QuietHoursRule{}, fmt.Errorf("config: %s.end: %w", key, err)
	}
	if r.Start == r.End || (r.Start == 0 && r.End == 24*time.Hour) {
		return QuietHoursRule{}, fmt.Errorf("config: %s: start %s and end %s leave no quiet hours (to send at any hour, set enabled: false)", key, w.Start, w.End)
	}
	if r.Zone, err = validate.TimeZone(w.TimeZone); err != nil {
		return QuietHoursRule{}, fmt.Errorf("config: %s.time_zone: %w", key, err)
	}
	if w.StopReleaseBefore != nil {
		r.StopReleaseBefore = w.StopReleaseBefore.D()
	}
	open := r.End - r.Start
	if open <= 0 {
		open += 24 * time.Hour
	}
	if r.StopReleaseBefore < 0 || r.StopReleaseBefore >= open {
		return QuietHoursRule{}, fmt.Errorf("config: %s.stop_release_before: must be at least 0 and shorter than the window (%s), got %s", key, open, r.StopReleaseBefore)
	}
	return r, nil
}

// timeOfDay parses "HH:MM", 00:00 to 23:59; for an end, midnight is
// 24:00 (written "24:00" or "00:00").
func timeOfDay(s string, end bool) (time.Duration, error) {
	hh, mm, ok := strings.Cut(s, ":")
	h, herr := strconv.Atoi(hh)
	m, merr := strconv.Atoi(mm)
	if !ok || len(hh) != 2 || len(mm) != 2 || herr != nil || merr != nil || h < 0 || m < 0 || m > 59 ||
		h > 24 || (h == 24 && (!end || m != 0)) {
		return 0, fmt.Errorf("%q is not a time of day (\"HH:MM\", 00:00 to 23:59)", s)
	}
	d := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute
	if end && d == 0 {
		d = 24 * time.Hour
	}
	return d, nil
}

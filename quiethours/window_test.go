package quiethours_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/quiethours"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// clockTime is h:m as a time of day.
func clockTime(h, m int) time.Duration {
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute
}

// seed000 is the seed's window: 08:00–20:50, the dispatcher stopping at 20:40.
func seed000(z *time.Location) quiethours.Window {
	return quiethours.Window{Start: clockTime(8, 0), End: clockTime(20, 50), StopReleaseBefore: 10 * time.Minute, Zone: z}
}

type windowCase struct {
	name string
	at   time.Time
	// open and release are what Open and OpenForRelease answer at at.
	open, release bool
	// next is NextOpening(at), asked only when release is false.
	next time.Time
}

func checkWindow(t *testing.T, w quiethours.Window, cases []windowCase) {
	t.Helper()
	for _, c := range cases {
		if got := w.Open(c.at, w.Zone); got != c.open {
			t.Errorf("%s: Open(%s) = %v, want %v", c.name, c.at, got, c.open)
		}
		if got := w.OpenForRelease(c.at, w.Zone); got != c.release {
			t.Errorf("%s: OpenForRelease(%s) = %v, want %v", c.name, c.at, got, c.release)
		}
		if c.release {
			continue
		}
		if got := w.NextOpening(c.at, w.Zone); !got.Equal(c.next) {
			t.Errorf("%s: NextOpening(%s) = %s (wait %s), want %s (wait %s)", c.name, c.at, got, got.Sub(c.at), c.next, c.next.Sub(c.at))
		}
	}
}

// Seoul's evening and night, across midnight: the dispatcher stops at
// 20:40, the sender at 20:50, and both wait for 08:00 — the same day's
// after midnight, the next day's before it.
func TestSeoulAcrossMidnight(t *testing.T) {
	t.Parallel()
	seoul := zone(t, "Asia/Seoul")
	at := func(d, h, m, s int) time.Time { return time.Date(2026, 6, d, h, m, s, 0, seoul) }
	next11, next12 := at(11, 8, 0, 0), at(12, 8, 0, 0)
	checkWindow(t, seed000(seoul), []windowCase{
		{"BeforeTheOpening", at(11, 7, 59, 59), false, false, next11},
		{"TheOpening", at(11, 8, 0, 0), true, true, time.Time{}},
		{"Afternoon", at(11, 15, 0, 0), true, true, time.Time{}},
		{"TheLastReleasedSecond", at(11, 20, 39, 59), true, true, time.Time{}},
		{"TheDispatcherStops", at(11, 20, 40, 0), true, false, next12},
		{"TheSenderStillSends", at(11, 20, 49, 59), true, false, next12},
		{"TheSenderStops", at(11, 20, 50, 0), false, false, next12},
		{"BeforeMidnight", at(11, 23, 59, 59), false, false, next12},
		{"Midnight", at(12, 0, 0, 0), false, false, next12},
		{"AfterMidnight", at(12, 0, 0, 1), false, false, next12},
		// The same instant written in UTC: the wall clock is Seoul's.
		{"GivenInUTC", time.Date(2026, 6, 11, 12, 0, 0, 0, time.UTC), false, false, next12},
	})
}

// New York on both days its clocks change (2026: set forward at 02:00 on
// 8 March, back at 02:00 on 1 November): the window keeps its wall-clock
// times, so the night's wait is ten or twelve hours, not eleven.
func TestNewYorkAcrossDaylightSavingChanges(t *testing.T) {
	t.Parallel()
	ny := zone(t, "America/New_York")
	checkWindow(t, seed000(ny), []windowCase{
		// 21:00 EST → 08:00 EDT: 10 hours.
		{"SpringForwardNight", time.Date(2026, 3, 8, 2, 0, 0, 0, time.UTC), false, false, time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)},
		// 20:40 EDT on the short day itself stops the dispatcher.
		{"SpringForwardEvening", time.Date(2026, 3, 9, 0, 40, 0, 0, time.UTC), true, false, time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)},
		{"SpringForwardMorning", time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC), true, true, time.Time{}},
		// 21:00 EDT → 08:00 EST: 12 hours.
		{"FallBackNight", time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC), false, false, time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC)},
		// 07:30 EST is still closed, 12:00 UTC (07:00 EST, not 08:00 EDT).
		{"FallBackBeforeOpening", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), false, false, time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC)},
		{"FallBackOpening", time.Date(2026, 11, 1, 13, 0, 0, 0, time.UTC), true, true, time.Time{}},
	})
}

// A window that opens at a time the clocks skip opens when they jump past
// it; one that opens at a time they show twice opens the first time. Both
// directions are checked in a zone west of UTC (New York) and one east of
// it (Paris), where time.Date resolves such times differently.
func TestAnOpeningTheClocksSkipOrRepeat(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		zone       string
		start      time.Duration
		at, opened time.Time
	}{
		// 02:30 does not exist on 8 March: the clocks go from 02:00 EST to 03:00 EDT (07:00 UTC).
		{"America/New_York", clockTime(2, 30), time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC), time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)},
		// 01:30 happens twice on 1 November: first at 05:30 UTC (EDT).
		{"America/New_York", clockTime(1, 30), time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)},
		// 02:30 does not exist on 29 March: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
		{"Europe/Paris", clockTime(2, 30), time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)},
		// 02:30 happens twice on 25 October: first at 00:30 UTC (CEST).
		{"Europe/Paris", clockTime(2, 30), time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)},
	} {
		z := zone(t, c.zone)
		w := quiethours.Window{Start: c.start, End: clockTime(20, 0), Zone: z}
		if got := w.NextOpening(c.at, z); !got.Equal(c.opened) {
			t.Errorf("%s, start %s, at %s: opens %s, want %s", c.zone, c.start, c.at.In(z), got.In(z), c.opened.In(z))
		}
		if w.Open(c.at, z) || !w.Open(c.opened, z) {
			t.Errorf("%s, start %s: open at %s = %v and at the opening %s = %v, want false and true",
				c.zone, c.start, c.at.In(z), w.Open(c.at, z), c.opened.In(z), w.Open(c.opened, z))
		}
	}
}

// A window whose end comes before its start runs across midnight.
func TestAWindowAcrossMidnight(t *testing.T) {
	t.Parallel()
	seoul := zone(t, "Asia/Seoul")
	at := func(d, h, m int) time.Time { return time.Date(2026, 6, d, h, m, 0, 0, seoul) }
	w := quiethours.Window{Start: clockTime(22, 0), End: clockTime(2, 0), StopReleaseBefore: 30 * time.Minute, Zone: seoul}
	checkWindow(t, w, []windowCase{
		{"Afternoon", at(11, 15, 0), false, false, at(11, 22, 0)},
		{"Opening", at(11, 22, 0), true, true, time.Time{}},
		{"AfterMidnight", at(12, 1, 0), true, true, time.Time{}},
		{"DispatcherStops", at(12, 1, 30), true, false, at(12, 22, 0)},
		{"Closed", at(12, 2, 0), false, false, at(12, 22, 0)},
	})
	// Until midnight: 24:00 is an end.
	late := quiethours.Window{Start: clockTime(9, 0), End: 24 * time.Hour, Zone: seoul}
	if !late.Open(at(11, 23, 59), seoul) || late.Open(at(12, 0, 0), seoul) {
		t.Errorf("09:00–24:00: open at 23:59 %v, at 00:00 %v; want true, false", late.Open(at(11, 23, 59), seoul), late.Open(at(12, 0, 0), seoul))
	}
}

func TestWindowValidate(t *testing.T) {
	t.Parallel()
	seoul := zone(t, "Asia/Seoul")
	for name, w := range map[string]quiethours.Window{
		"NoZone":            {Start: clockTime(8, 0), End: clockTime(20, 50)},
		"StartPastTheDay":   {Start: 24 * time.Hour, End: clockTime(20, 50), Zone: seoul},
		"NegativeStart":     {Start: -time.Minute, End: clockTime(20, 50), Zone: seoul},
		"NoEnd":             {Start: clockTime(8, 0), Zone: seoul},
		"EndPastTheDay":     {Start: clockTime(8, 0), End: 25 * time.Hour, Zone: seoul},
		"Empty":             {Start: clockTime(8, 0), End: clockTime(8, 0), Zone: seoul},
		"StopAsLongAsOpen":  {Start: clockTime(8, 0), End: clockTime(9, 0), StopReleaseBefore: time.Hour, Zone: seoul},
		"NegativeStopDelay": {Start: clockTime(8, 0), End: clockTime(9, 0), StopReleaseBefore: -time.Minute, Zone: seoul},
	} {
		if err := w.Validate(); err == nil {
			t.Errorf("%s: %+v validates", name, w)
		}
	}
	if err := seed000(seoul).Validate(); err != nil {
		t.Errorf("the seed's window: %v", err)
	}
}

// Los Angeles and Berlin on their 2026 clock changes: the morning opening
// at 08:00 local lands on the UTC instant of that day's offset.
func TestLosAngelesAndBerlinAcrossDaylightSavingChanges(t *testing.T) {
	t.Parallel()
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	la, berlin := zone(t, "America/Los_Angeles"), zone(t, "Europe/Berlin")
	checkWindow(t, seed000(la), []windowCase{
		// 21:00 PST on 7 March → 08:00 PDT on 8 March (15:00 UTC).
		{"LASpringForwardNight", utc(3, 8, 5, 0), false, false, utc(3, 8, 15, 0)},
		{"LASpringForwardJustBefore", utc(3, 8, 14, 59), false, false, utc(3, 8, 15, 0)},
		{"LASpringForwardOpening", utc(3, 8, 15, 0), true, true, time.Time{}},
		// 21:00 PDT on 31 October → 08:00 PST on 1 November (16:00 UTC).
		{"LAFallBackNight", utc(11, 1, 4, 0), false, false, utc(11, 1, 16, 0)},
		{"LAFallBackAtOldOpening", utc(11, 1, 15, 0), false, false, utc(11, 1, 16, 0)},
		{"LAFallBackOpening", utc(11, 1, 16, 0), true, true, time.Time{}},
	})
	checkWindow(t, seed000(berlin), []windowCase{
		// 21:00 CET on 28 March → 08:00 CEST on 29 March (06:00 UTC).
		{"BerlinSpringForwardNight", utc(3, 28, 20, 0), false, false, utc(3, 29, 6, 0)},
		{"BerlinSpringForwardOpening", utc(3, 29, 6, 0), true, true, time.Time{}},
		// 21:00 CEST on 24 October → 08:00 CET on 25 October (07:00 UTC).
		{"BerlinFallBackNight", utc(10, 24, 19, 0), false, false, utc(10, 25, 7, 0)},
		{"BerlinFallBackAtOldOpening", utc(10, 25, 6, 0), false, false, utc(10, 25, 7, 0)},
		{"BerlinFallBackOpening", utc(10, 25, 7, 0), true, true, time.Time{}},
	})
}

// A window that opens at a time the clocks show twice is closed again
// during the repeated hour until the second showing; a send deferred then
// waits for that second showing, not for the next day.
func TestTheSecondShowingOfARepeatedOpening(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		zone       string
		at, opened time.Time
	}{
		// 01:30 PDT opened at 08:30 UTC; 01:10 PST (09:10 UTC) shows a closed wall clock until 01:30 PST (09:30 UTC).
		{"America/Los_Angeles", time.Date(2026, 11, 1, 9, 10, 0, 0, time.UTC), time.Date(2026, 11, 1, 9, 30, 0, 0, time.UTC)},
		// 02:30 CEST opened at 00:30 UTC; 02:10 CET (01:10 UTC) until 02:30 CET (01:30 UTC).
		{"Europe/Berlin", time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC)},
	} {
		z := zone(t, c.zone)
		start := clockTime(1, 30)
		if c.zone == "Europe/Berlin" {
			start = clockTime(2, 30)
		}
		w := seed000(z)
		w.Start = start
		if w.Open(c.at, z) {
			t.Fatalf("%s: open at %s", c.zone, c.at.In(z))
		}
		if !w.Open(c.opened, z) {
			t.Fatalf("%s: closed at %s", c.zone, c.opened.In(z))
		}
		if got := w.NextOpening(c.at, z); !got.Equal(c.opened) {
			t.Errorf("%s at %s: opens %s, want %s", c.zone, c.at.In(z), got.In(z), c.opened.In(z))
		}
	}
}

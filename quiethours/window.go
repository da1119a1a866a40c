package quiethours

import (
	"errors"
	"fmt"
	"time"
)

// day is the length of a wall-clock day; a window's times of day are
// offsets into it.
const day = 24 * time.Hour

// Window is a daily window of wall-clock time in which marketing may be
// sent.
type Window struct {
	// Start is the time of day the window opens: 0 ≤ Start < 24h.
	Start time.Duration
	// End is the time of day it closes: 0 < End ≤ 24h (24h is midnight),
	// and not Start. An End before Start runs the window across midnight.
	End time.Duration
	// StopReleaseBefore is how long before End the dispatcher's window
	// ends: 0 ≤ StopReleaseBefore < the window's length.
	StopReleaseBefore time.Duration
	// Zone is the wall clock of the recipients whose profile names no
	// time zone. Required.
	Zone *time.Location
}

// Validate reports what is wrong with w, naming the field.
func (w Window) Validate() error {
	switch {
	case w.Zone == nil:
		return errors.New("quiet hours: no time zone")
	case w.Start < 0 || w.Start >= day:
		return fmt.Errorf("quiet hours: start %s is not a time of day", w.Start)
	case w.End <= 0 || w.End > day:
		return fmt.Errorf("quiet hours: end %s is not a time of day", w.End)
	case w.Start == w.End:
		return errors.New("quiet hours: start and end are the same time: the window would be empty")
	case w.StopReleaseBefore < 0 || w.StopReleaseBefore >= w.length():
		return fmt.Errorf("quiet hours: stop_release_before %s must be at least 0 and shorter than the window (%s)", w.StopReleaseBefore, w.length())
	}
	return nil
}

// length is how long the window stays open on a day of 24 wall-clock hours.
func (w Window) length() time.Duration {
	l := w.End - w.Start
	if l <= 0 {
		l += day
	}
	return l
}

// Open reports whether t lies inside the window on zone's wall clock: the
// sender's rule.
func (w Window) Open(t time.Time, zone *time.Location) bool { return w.open(t, zone, 0) }

// OpenForRelease reports whether t lies inside the dispatcher's window on
// zone's wall clock: the window without its last StopReleaseBefore.
func (w Window) OpenForRelease(t time.Time, zone *time.Location) bool {
	return w.open(t, zone, w.StopReleaseBefore)
}

// open reports whether the time of day of t on zone's wall clock lies in
// [Start, End − cut), across midnight when End is before Start. The wall
// clock decides, not the hours elapsed: on a day with a daylight-saving
// change the window keeps its clock times, and a wall-clock hour that
// happens twice (clocks set back) is inside or outside both times.
func (w Window) open(t time.Time, zone *time.Location, cut time.Duration) bool {
	d := timeOfDay(t.In(zone)) - w.Start
	if d < 0 {
		d += day
	}
	return d < w.length()-cut
}

// timeOfDay is t's wall-clock time since its midnight.
func timeOfDay(t time.Time) time.Duration {
	h, m, s := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(t.Nanosecond())
}

// NextOpening is the first instant after t at which zone's wall clock
// reaches Start: when a send deferred at t may go. A Start the clocks skip
// (set forward across it) opens when they jump past it; a Start they pass
// twice (set back) opens the first time, and again the second time, as
// Open reads the wall clock: a send deferred during the repeated hour,
// between the two, goes at the second, not a day later.
func (w Window) NextOpening(t time.Time, zone *time.Location) time.Time {
	y, m, d := t.In(zone).Date()
	// Today's opening, or tomorrow's; the third day is only reached if a
	// zone's rules moved a whole day (Samoa skipped 30 December 2011).
	for i := range 3 {
		if u, ok := wallInstant(y, m, d+i, w.Start, zone, t); ok {
			return u
		}
	}
	u, _ := wallInstant(y, m, d+3, w.Start, zone, time.Time{})
	return u
}

// wallInstant is the first instant after after at which zone's wall clock
// shows the date y-m-d (normalised as time.Date does) at time of day tod,
// or, when the clocks skip that time, the instant they jump past it; false
// when that date shows it only at or before after. time.Date leaves both
// cases to chance ("the choice of time zone, and therefore the time, is not
// guaranteed"); this does not.
func wallInstant(y int, m time.Month, d int, tod time.Duration, zone *time.Location, after time.Time) (time.Time, bool) {
	naive := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(tod)
	// The offsets in force a day either side: any change of offset near
	// the wall time lies between them.
	_, before := naive.Add(-day).In(zone).Zone()
	_, later := naive.Add(day).In(zone).Zone()
	var first time.Time
	found, shown := false, false
	for _, off := range []int{before, later} {
		u := naive.Add(-time.Duration(off) * time.Second)
		if _, o := u.In(zone).Zone(); o != off {
			continue
		}
		shown = true
		if u.After(after) && (!found || u.Before(first)) {
			first, found = u, true
		}
	}
	if shown {
		return first, found
	}
	// Neither offset shows that wall time: the clocks jumped over it. Read
	// with the earlier offset it lies past the jump, in the zone period
	// that begins there.
	start, _ := naive.Add(-time.Duration(before) * time.Second).In(zone).ZoneBounds()
	return start, start.After(after)
}

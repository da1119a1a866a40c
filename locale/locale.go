// Package locale chooses which of a kind's per-locale templates a recipient
// gets. A kind's templates may be one text per channel, or one per locale
// ("ko", "en", "en-gb", and "default"); the recipient's profile language
// picks among them, read at render time (the sender's send, or intake's
// inbox write), so a profile changed after intake still counts for sends
// that have not gone out.
package locale

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/language"
)

// Default names the text a kind falls back to when the recipient's
// language matches none of its locales (or the profile has none).
const Default = "default"

// Normalize returns the lower-case form a locale key is compared in
// ("en_GB" and "en-GB" become "en-gb"); Default and "" stay as they are.
func Normalize(tag string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(tag), "_", "-"))
}

// Valid reports whether key is Default or a well-formed BCP 47 tag.
func Valid(key string) bool {
	if Normalize(key) == Default {
		return true
	}
	_, err := language.Parse(key)
	return err == nil
}

// Pick returns the index in available of the text for a recipient whose
// profile language is lang: the best match by BCP 47 rules ("en-US" takes
// "en", "zh-TW" takes "zh-Hant" over "zh"), else Default, else "" (a
// template without locales), else the first. It returns -1 only when
// available is empty. Keys that do not parse never match a language.
func Pick(available []string, lang string) int {
	if len(available) == 0 {
		return -1
	}
	s := setOf(available)
	want, err := language.Parse(lang)
	if lang == "" || err != nil || s.matcher == nil {
		return s.fallback
	}
	_, i, conf := s.matcher.Match(want)
	if conf == language.No {
		return s.fallback
	}
	return s.index[i]
}

// set is what Pick needs of one list of locale keys: its fallback, and a
// matcher over the keys that parse (nil when none does) with their
// indexes in the list.
type set struct {
	available []string
	fallback  int
	matcher   language.Matcher
	index     []int
}

// Building a matcher costs some 50 µs and 200 allocations, and Pick runs
// on every send of a kind with per-locale texts and every inbox write of
// one, so each list's set is built once. The lists are the configured
// kinds' (a channel's locales, the inbox texts rendered from them): few.
// The cache stops growing at maxSets all the same; a list beyond it is
// built per call.
var (
	sets     sync.Map // the list joined by "\x00" → *set
	setCount atomic.Int32
)

const maxSets = 1024

func setOf(available []string) *set {
	key := strings.Join(available, "\x00")
	if v, ok := sets.Load(key); ok {
		if s := v.(*set); slices.Equal(s.available, available) {
			return s
		}
	}
	s := newSet(available)
	if setCount.Load() < maxSets {
		if _, loaded := sets.LoadOrStore(key, s); !loaded {
			setCount.Add(1)
		}
	}
	return s
}

func newSet(available []string) *set {
	s := &set{available: slices.Clone(available)}
	for i, a := range available {
		switch Normalize(a) {
		case Default:
			s.fallback = i
		case "":
			if Normalize(available[s.fallback]) != Default {
				s.fallback = i
			}
		}
	}
	var tags []language.Tag
	for i, a := range available {
		if t, err := language.Parse(a); err == nil && Normalize(a) != Default {
			tags, s.index = append(tags, t), append(s.index, i)
		}
	}
	if len(tags) > 0 {
		s.matcher = language.NewMatcher(tags)
	}
	return s
}

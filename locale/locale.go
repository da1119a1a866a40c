// Package locale chooses which of a kind's per-locale templates a recipient
// gets. A kind's templates may be one text per channel, or one per locale
// ("ko", "en", "en-gb", and "default"); the recipient's profile language
// picks among them, read at render time (the sender's send, or intake's
// inbox write), so a profile changed after intake still counts for sends
// that have not gone out.
package locale

import (
	"strings"

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
	fallback := 0
	for i, a := range available {
		switch Normalize(a) {
		case Default:
			fallback = i
		case "":
			if Normalize(available[fallback]) != Default {
				fallback = i
			}
		}
	}
	want, err := language.Parse(lang)
	if lang == "" || err != nil {
		return fallback
	}
	var tags []language.Tag
	var index []int
	for i, a := range available {
		if t, err := language.Parse(a); err == nil && Normalize(a) != Default {
			tags, index = append(tags, t), append(index, i)
		}
	}
	if len(tags) == 0 {
		return fallback
	}
	_, i, conf := language.NewMatcher(tags).Match(want)
	if conf == language.No {
		return fallback
	}
	return index[i]
}

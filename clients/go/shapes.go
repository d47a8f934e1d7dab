package idmint

import (
	"fmt"
	"regexp"
	"strings"
)

// What an ID looks like: each scheme's token pattern per text form, from GET /v1/schemes (token_patterns). Every
// answer is checked against it before any of it is handed out (a batch whole, a stream chunk by chunk of complete
// lines), so "", null, numbers or an HTML page from a server or a proxy fail that server, never become IDs.

const shownChars = 80

type idShape struct {
	scheme, format string
	one, lines     *regexp.Regexp
	missing        string
	rising         map[string][]string // GET /v1/schemes' rising entry of this form: option -> values it needs
	risingKnown    bool                // the form is in rising
	order          *identityOrder      // rising_per_identity's entry of this form (nil: none, or unreadable)
	orderNeeds     map[string][]string // the options (and values) under which order applies
	longest        int                 // the most characters one ID has (GET /v1/schemes' max_lengths): answers are bounded by it
}

// rule tells what an answer under options is checked for: rising within it (rises), and rising per issuing
// identity across answers when the form is in rising_per_identity and options name what it needs.
func (s *idShape) rule(options map[string]string) rule {
	r := rule{scheme: s.scheme, rising: s.rises(options)}
	if s.order != nil && satisfied(s.orderNeeds, options) {
		r.order = s.order
	}
	return r
}

// rises tells whether one answer's IDs must strictly rise under options (the form is rising and options name one
// of the values each option it needs).
func (s *idShape) rises(options map[string]string) bool {
	return s.risingKnown && satisfied(s.rising, options)
}

// satisfied tells whether options name one of the values each option of needs lists.
func satisfied(needs map[string][]string, options map[string]string) bool {
	for name, values := range needs {
		value, ok := options[name]
		if !ok {
			return false
		}
		found := false
		for _, v := range values {
			found = found || v == value
		}
		if !found {
			return false
		}
	}
	return true
}

func newShape(scheme, format, pattern string, known bool) *idShape {
	s := &idShape{scheme: scheme, format: format, longest: maxLineChars}
	if !known {
		s.missing = fmt.Sprintf("/v1/schemes gives no token pattern for %s in format %q: its answers cannot be checked",
			scheme, format)
		return s
	}
	one, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err == nil {
		s.one = one
		s.lines, err = regexp.Compile(`^(?:` + pattern + `)(?:\n(?:` + pattern + `))*$`)
	}
	if err != nil {
		s.missing = fmt.Sprintf("/v1/schemes gives a token pattern for %s in format %q that is no regex: %v",
			scheme, format, err)
	}
	return s
}

func shown(text string) string {
	if len(text) > shownChars {
		text = text[:shownChars]
	}
	return "'" + text + "'"
}

// checkLines checks complete lines (joined by \n, no final newline), the first being line first of the answer.
func (s *idShape) checkLines(text string, lines []string, first int) error {
	if s.missing != "" {
		return &failed{s.missing}
	}
	if s.lines.MatchString(text) {
		return nil
	}
	for i, line := range lines {
		if !s.one.MatchString(line) {
			return failf("line %d is not a %s ID (%s): %s", first+i, s.scheme, s.format, shown(line))
		}
	}
	return nil
}

// checkIDs checks the ids of a batch answer (already known to be strings).
func (s *idShape) checkIDs(ids []string) error {
	if s.missing != "" {
		return &failed{s.missing}
	}
	for i, id := range ids {
		if strings.Contains(id, "\n") || !s.one.MatchString(id) {
			return failf("ID %d is not a %s ID (%s): %s", i+1, s.scheme, s.format, shown(id))
		}
	}
	return nil
}

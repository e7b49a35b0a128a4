package statuspage

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/dbinformer/dbinformer/core/driver"
)

// Everything the page shows that came from outside (informer, handler
// and queue names, source kinds, error messages) goes through Redact:
// adapters keep secrets out of their errors, but a name is whatever the
// program chose, and a connection string pasted into one must not reach a
// page that anyone on the debug port can read.

var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	// The userinfo of a URL: postgres://user:pass@host, nats://token@host.
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@"']*@`), "${1}REDACTED@"},
	// An authorization header's value, with or without its scheme.
	{regexp.MustCompile(`(?i)\b(authorization["']?\s*[:=]\s*["']?)((?:bearer|basic|token|digest)\s+)?[^\s,;"']+`), "${1}${2}REDACTED"},
	// key=value and key: value settings whose key names a secret
	// (libpq's password=..., sslpassword=..., a token: ..., api_key=...).
	{regexp.MustCompile(`(?i)\b([a-z_\-]*(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|credential|credentials|nkey|seed|jwt)[a-z_\-]*)("?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;&"']+)`), "${1}${2}REDACTED"},
	// HTTP authorization values.
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}`), "${1} REDACTED"},
	// JSON web tokens, wherever they are.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*`), "REDACTED"},
	// NATS nkey seeds (user, account, operator).
	{regexp.MustCompile(`\bS[UAO][A-Z2-7]{56}\b`), "REDACTED"},
}

// Redact removes what looks like a secret from s: the user and password
// of a URL, the value of a setting whose name says password, secret,
// token, key or credentials, bearer and basic credentials, JSON web tokens
// and NATS seeds. The page runs every name and message it shows through
// it; it is exported for programs that print names of their own beside it.
func Redact(s string) string {
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// maxMessage bounds an error message on the page: long ones are cut (a
// message is a reason, not a dump).
const maxMessage = 300

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// describeError is how an error appears on the page: one line, redacted,
// clipped.
func describeError(err error) string {
	if err == nil {
		return ""
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return clip(Redact(msg), maxMessage)
}

// describeDecodeError names where a change failed to decode and why: the
// source, key and version of the *driver.DecodeError and its reason (which
// core's codecs keep free of the value).
func describeDecodeError(de *driver.DecodeError) string { return describeError(de) }

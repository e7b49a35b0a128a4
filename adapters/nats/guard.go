package natsinformer

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// checkPattern validates a subject pattern made of dot-separated tokens: no
// empty token, no whitespace, "*" only as a whole token, ">" only as the
// whole last token. what names the setting for the error.
func checkPattern(what, p string, wildcards bool) error {
	if p == "" {
		return fmt.Errorf("%s is empty", what)
	}
	toks := strings.Split(p, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("%s %q has an empty token (two dots in a row, or a leading or trailing dot)", what, p)
		case strings.ContainsAny(t, " \t\r\n"):
			return fmt.Errorf("%s %q contains whitespace", what, p)
		case t == "*" || t == ">":
			if !wildcards {
				return fmt.Errorf("%s %q contains the wildcard %q; it must be literal", what, p, t)
			}
			if t == ">" && i != len(toks)-1 {
				return fmt.Errorf("%s %q has \">\" before its last token", what, p)
			}
		case strings.ContainsAny(t, "*>"):
			return fmt.Errorf("%s %q has %q inside a token; a wildcard must be a whole token", what, p, t)
		}
	}
	return nil
}

// guard runs user code (a reducer, a key function) and turns a panic into
// an error, so that one bad event cannot take the watch down. Codecs go
// through codec.Decode, which does the same.
func guard(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	return f()
}

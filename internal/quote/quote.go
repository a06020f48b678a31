// Package quote quotes user inputs into errors and log lines up to a
// bound. A rule, a label value or a name can be of any length, and an error
// that quotes it whole is a log line (and an /api/rawdata entry) as long as
// the input: a 1 MB rule made a 1 MB line. Quoted through Q, an input longer
// than Max bytes shows its first Max bytes and says how long it is.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Max is how many bytes of an input an error shows.
const Max = 256

// Q returns s quoted as %q quotes it when it is at most Max bytes long.
// A longer s is quoted up to Max bytes (cut at a character boundary), with
// "…" inside the quotes, then its length:
//
//	"HostSNI(`aaaa…" (1048576 bytes, first 256 shown)
func Q(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	n := Max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if n < Max-utf8.UTFMax { // not UTF-8 at all: cut at Max, %q shows the bytes
		n = Max
	}
	return strconv.Quote(s[:n]+"…") + " (" + strconv.Itoa(len(s)) + " bytes, first " + strconv.Itoa(n) + " shown)"
}

// Text returns s as it is when it is at most Max bytes long, else Q(s): for
// an input shown as written (a string literal of a rule, already quoted).
func Text(s string) string {
	if len(s) <= Max {
		return s
	}
	return Q(s)
}

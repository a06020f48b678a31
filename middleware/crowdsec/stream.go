package crowdsec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// The Local API's stream (GET /v1/decisions/stream): a JSON object
//
//	{"new": [decision, ...] | null, "deleted": [decision, ...] | null}
//
// where a decision is {"id", "origin", "scenario", "scope", "type", "value",
// "duration"} and duration is Go's time.Duration text, negative for one
// that has ended. With startup=true, new is every active decision (the
// longest one per value); after that, the decisions that began or ended
// since this bouncer's previous pull. CrowdSec's bouncers apply deleted
// before new, by value; so does this one.

// streamDecision is one decision as the LAPI writes it.
type streamDecision struct {
	ID       int64  `json:"id"`
	Origin   string `json:"origin"`
	Scenario string `json:"scenario"`
	Scope    string `json:"scope"`
	Type     string `json:"type"`
	Value    string `json:"value"`
	Duration string `json:"duration"`
}

// maxBody bounds a stream response (a startup pull with the community
// blocklist is tens of MB).
const maxBody = 512 << 20

// decodeStream reads a stream response, calling f for each decision in
// order (deleted true for those under "deleted"). Unknown keys are skipped.
// The decisions are decoded one at a time, so that a large startup pull
// holds one decision in memory besides the caller's state.
func decodeStream(r io.Reader, f func(deleted bool, d *streamDecision)) error {
	dec := json.NewDecoder(io.LimitReader(r, maxBody))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if key != "new" && key != "deleted" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		tok, err = dec.Token()
		if err != nil {
			return err
		}
		if tok == nil {
			continue // null: nothing
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return fmt.Errorf("%q is not a list of decisions", key)
		}
		for dec.More() {
			var d streamDecision
			if err := dec.Decode(&d); err != nil {
				return fmt.Errorf("a decision under %q: %w", key, err)
			}
			f(key == "deleted", &d)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	// Nothing may follow the object (a truncated or doubled body is not
	// taken for a whole one).
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the stream's object")
	}
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, got %v", want, tok)
	}
	return nil
}

// Why a decision of the stream is not applied.
var (
	errNotBan   = errors.New("not a ban")
	errScope    = errors.New("scope is neither Ip nor Range")
	errValue    = errors.New("value does not parse for its scope")
	errDuration = errors.New("duration does not parse")
)

// parseDecision returns the prefix a ban decision covers (an address as a
// /32 or /128; IPv4-mapped IPv6 as IPv4) and how long it lasts from now.
// A duration that does not parse comes with errDuration and the prefix: the
// ban is kept until the LAPI deletes it (it always says when a decision
// ends), rather than dropped. Other errors leave the decision out: a type
// other than ban (captcha, throttle: nothing a TCP proxy can serve), or a
// scope other than Ip and Range (Country, AS: geoIP's work).
func parseDecision(d *streamDecision) (netip.Prefix, time.Duration, error) {
	if !strings.EqualFold(d.Type, "ban") {
		return netip.Prefix{}, 0, errNotBan
	}
	var p netip.Prefix
	switch {
	case strings.EqualFold(d.Scope, "ip"):
		a, err := netip.ParseAddr(strings.TrimSpace(d.Value))
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, 0, errValue
		}
		a = a.Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	case strings.EqualFold(d.Scope, "range"):
		q, err := netip.ParsePrefix(strings.TrimSpace(d.Value))
		if err != nil {
			return netip.Prefix{}, 0, errValue
		}
		if a := q.Addr(); a.Is4In6() && q.Bits() >= 96 {
			q = netip.PrefixFrom(a.Unmap(), q.Bits()-96)
		}
		p = q.Masked()
	default:
		return netip.Prefix{}, 0, errScope
	}
	dur, err := time.ParseDuration(d.Duration)
	if err != nil {
		return p, 0, errDuration
	}
	return p, dur, nil
}

package config

import (
	"errors"
	"fmt"
)

// FieldError is an error about one field of a dynamic resource, so that
// whoever reports it (the API, tollgate check placing it on a label or a
// file line) knows which key it is about without reading its words. Field
// is the dotted path below the resource, as written in files, with list
// indexes in brackets: "inFlightConn.amount", "ipAllowList.sourceRange[2]",
// "loadBalancer.servers[0]", "rule".
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrorf returns a FieldError for field with a formatted message
// (%w wraps as in fmt.Errorf).
func FieldErrorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// FieldOf returns the field an error is about, or "" when it does not say.
func FieldOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

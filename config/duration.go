package config

import (
	"time"

	ptypes "github.com/traefik/paerser/types"
)

// Duration is a time.Duration that decodes from "10s", "250ms" or a bare number
// of seconds, in flags, env vars, files and labels alike (paerser's Duration).
type Duration = ptypes.Duration

// Std returns d as a time.Duration.
func Std(d Duration) time.Duration { return time.Duration(d) }

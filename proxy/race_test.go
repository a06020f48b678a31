//go:build race

package proxy

// raceEnabled scales the heaviest loops down under the race detector, which
// makes every connection about ten times slower.
const raceEnabled = true

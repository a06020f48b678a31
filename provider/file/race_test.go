//go:build race

package file

// raceEnabled: the race detector changes what allocates (sync.Pool drops
// what it is given at random), so memory bounds are not checked under it.
const raceEnabled = true

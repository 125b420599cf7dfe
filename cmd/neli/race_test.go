//go:build race

package main

// raceEnabled makes the test build the neli binary with the race detector too, so that the
// processes under test are checked as well as the test itself.
const raceEnabled = true

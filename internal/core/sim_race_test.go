//go:build race

package core

// simRace says that the tests run under the race detector, which slows the simulation some tenfold:
// the short search then runs fewer schedules (simShortSchedules).
const simRace = true

//go:build !race

package goneli

const simRace = false

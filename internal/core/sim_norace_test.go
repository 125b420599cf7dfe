//go:build !race

package core

const simRace = false

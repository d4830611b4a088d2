//go:build !race

package train

const raceDetector = false

//go:build race

package train

// raceDetector: the race detector slows this package's arithmetic some
// fiftyfold (TestTrainLearnsToCopy: 7 s, 350 s under it).
const raceDetector = true

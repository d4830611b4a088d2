// Package firmware embeds the BMC firmware sources (an Arduino sketch for the
// ATmega328P) and the script that builds them with avr-gcc against Debian's
// arduino-core-avr, so tools and tests can build the firmware from anywhere.
// It holds no Go logic.
package firmware

import "embed"

// Files holds build.sh and the sketch directory Sketch.
//
//go:embed build.sh bmc/bmc.ino bmc/sha256.c bmc/sha256.h
var Files embed.FS

// Sketch is the sketch directory inside Files; the build produces Sketch+".elf".
const Sketch = "bmc"

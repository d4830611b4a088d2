#!/bin/sh
# Build the BMC firmware for the Arduino Uno (ATmega328P, 16 MHz) with plain
# avr-gcc against Debian's arduino-core-avr: no IDE, no arduino-mk.
#   build.sh SKETCH_DIR OUT_DIR [extra compiler flags...]
# Produces OUT_DIR/<sketch>.elf and .hex and prints avr-size. Flash a real
# board with: avrdude -p m328p -c arduino -P /dev/ttyACM0 -b 115200 -U flash:w:OUT_DIR/bmc.hex
# (erase the EEPROM, and with it the key and boot counter, with avrdude -e).
set -eu
SKETCH_DIR=${1:?usage: build.sh SKETCH_DIR OUT_DIR [flags]}
OUT=${2:?usage: build.sh SKETCH_DIR OUT_DIR [flags]}
shift 2
EXTRA="$*"
ARDUINO=${ARDUINO_AVR:-/usr/share/arduino/hardware/arduino/avr}
CORE=$ARDUINO/cores/arduino
VAR=$ARDUINO/variants/standard
for tool in avr-gcc avr-g++ avr-gcc-ar avr-objcopy avr-size; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found: run scripts/install-deps.sh (gcc-avr avr-libc arduino-core-avr)" >&2; exit 127; }
done
[ -d "$CORE" ] || { echo "build.sh: $CORE missing: run scripts/install-deps.sh (arduino-core-avr)" >&2; exit 127; }

MCU=atmega328p
F_CPU=16000000L
COMMON="-mmcu=$MCU -DF_CPU=$F_CPU -DARDUINO=10807 -DARDUINO_AVR_UNO -DARDUINO_ARCH_AVR -I$CORE -I$VAR -Os -g -ffunction-sections -fdata-sections -flto -Wall $EXTRA"
CFLAGS="$COMMON -std=gnu11 -fno-fat-lto-objects"
# gcc-avr 5.4 lacks DECIMAL_DIG, which the core's WString.cpp needs.
CXXFLAGS="$COMMON -DDECIMAL_DIG=__DECIMAL_DIG__ -std=gnu++11 -fpermissive -fno-exceptions -fno-threadsafe-statics -Wno-error=narrowing"

mkdir -p "$OUT/core" "$OUT/sketch"
pids=""
for f in "$CORE"/*.c; do avr-gcc $CFLAGS -c "$f" -o "$OUT/core/$(basename "$f").o" & pids="$pids $!"; done
for f in "$CORE"/*.cpp; do avr-g++ $CXXFLAGS -w -c "$f" -o "$OUT/core/$(basename "$f").o" & pids="$pids $!"; done
for f in "$CORE"/*.S; do avr-gcc -mmcu=$MCU -DF_CPU=$F_CPU -I"$CORE" -I"$VAR" -x assembler-with-cpp -flto -c "$f" -o "$OUT/core/$(basename "$f").o" & pids="$pids $!"; done
fail=0
for p in $pids; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { echo "build.sh: Arduino core failed to compile" >&2; exit 1; }
rm -f "$OUT/core.a"
avr-gcc-ar rcs "$OUT/core.a" "$OUT"/core/*.o

for f in "$SKETCH_DIR"/*.ino; do avr-g++ $CXXFLAGS -Wextra -Werror -x c++ -include Arduino.h -c "$f" -o "$OUT/sketch/$(basename "$f").o"; done
for f in "$SKETCH_DIR"/*.c; do [ -e "$f" ] || continue; avr-gcc $CFLAGS -Wextra -Werror -c "$f" -o "$OUT/sketch/$(basename "$f").o"; done
NAME=$(basename "$SKETCH_DIR")
avr-gcc -mmcu=$MCU -Os -g -flto -fuse-linker-plugin -Wl,--gc-sections -o "$OUT/$NAME.elf" "$OUT"/sketch/*.o "$OUT/core.a" -lm
avr-objcopy -O ihex -R .eeprom "$OUT/$NAME.elf" "$OUT/$NAME.hex"
avr-size -C --mcu=$MCU "$OUT/$NAME.elf"

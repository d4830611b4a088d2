// Package harness embeds simbmc/simbmc.c, the simavr runner that bridges the
// emulated board's UART0 to a pty (see bmc/bmcsim). It holds no Go logic.
package harness

import _ "embed"

// Source is simbmc/simbmc.c. Build it with:
//
//	gcc -O2 -o simbmc simbmc.c -I/usr/include/simavr -I/usr/include/simavr/parts \
//	    -lsimavrparts -lsimavr -lpthread -lutil
//
//go:embed simbmc/simbmc.c
var Source []byte

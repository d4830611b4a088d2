/* simbmc: run the BMC firmware under simavr with UART0 bridged to a pty.
 *
 *   simbmc -l LINK [-e EEPROM_FILE] [-m MCU] [-f HZ] [-R] [-v] firmware.elf|.hex
 *
 *   -l  symlink to create to the pty slave (required: simavr's own
 *       /tmp/simavr-uart0 would clash between parallel runs, so it is removed)
 *   -e  EEPROM image file, loaded at start and kept up to date while running
 *       (written through within ~1 ms of simulated time of any change), so the
 *       boot counter and the provisioned key survive SIGKILL and restarts
 *   -R  free-running: do not throttle simulated time to the wall clock
 *   -v  let simavr log
 *
 * Prints "PTY <slave>" on stdout once the bridge is up. Exits on SIGTERM,
 * SIGINT, SIGHUP, or when its parent process goes away.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "avr_eeprom.h"
#include "avr_uart.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_hex.h"
#include "sim_time.h"
#include "uart_pty.h"

static uart_pty_t uart_pty;
static volatile sig_atomic_t stop;
static struct timespec t0;
static int realtime = 1;

static int ee_fd = -1;
static uint8_t *ee_live; /* simavr's EEPROM bytes */
static uint8_t ee_shadow[4096];
static uint32_t ee_size;

static void on_sig(int s) {
  (void)s;
  stop = 1;
}

static uint64_t wall_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t.tv_nsec - t0.tv_nsec);
}

/* Sleep until the wall clock catches up with simulated cycle 'cycle', so the
 * firmware's millis() runs at wall-clock speed. */
static void sync_wall(avr_t *avr, avr_cycle_count_t cycle) {
  uint64_t sim = (uint64_t)((long double)cycle * 1e9L / avr->frequency);
  uint64_t w = wall_ns();
  if (sim > w + 1000000) { /* batch sleeps: 1 ms of slack halves idle CPU */
    uint64_t d = sim - w;
    struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
    nanosleep(&ts, NULL);
  }
}

static void rt_sleep(avr_t *avr, avr_cycle_count_t howLong) {
  if (realtime) {
    sync_wall(avr, avr->cycle + howLong);
  } else {
    uint32_t us = avr_cycles_to_usec(avr, howLong);
    if (us > 0) usleep(us);
  }
}

static int ee_open(avr_t *avr, const char *path) {
  avr_eeprom_desc_t d = {.ee = NULL, .offset = 0, .size = 0};
  /* With ee == NULL simavr hands back a pointer to its own EEPROM bytes. */
  avr_ioctl(avr, AVR_IOCTL_EEPROM_GET, &d);
  if (!d.ee) {
    fprintf(stderr, "simbmc: no EEPROM on this MCU\n");
    return -1;
  }
  ee_live = d.ee;
  ee_size = avr->e2end + 1;
  if (ee_size > sizeof ee_shadow) ee_size = sizeof ee_shadow;
  ee_fd = open(path, O_RDWR | O_CREAT, 0600);
  if (ee_fd < 0) {
    fprintf(stderr, "simbmc: %s: %s\n", path, strerror(errno));
    return -1;
  }
  ssize_t n = pread(ee_fd, ee_shadow, ee_size, 0);
  if (n < 0) n = 0;
  /* A new or short file reads as erased EEPROM (0xFF). */
  memset(ee_shadow + n, 0xFF, ee_size - (size_t)n);
  memcpy(ee_live, ee_shadow, ee_size);
  if (pwrite(ee_fd, ee_shadow, ee_size, 0) != (ssize_t)ee_size) {
    fprintf(stderr, "simbmc: %s: write: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Write EEPROM changes through to the file; the page cache keeps them even
 * if this process is SIGKILLed right after. */
static void ee_sync(void) {
  if (ee_fd < 0 || !memcmp(ee_live, ee_shadow, ee_size)) return;
  memcpy(ee_shadow, ee_live, ee_size);
  if (pwrite(ee_fd, ee_shadow, ee_size, 0) != (ssize_t)ee_size)
    fprintf(stderr, "simbmc: eeprom write: %s\n", strerror(errno));
}

int main(int argc, char **argv) {
  const char *mcu = "atmega328p", *link = NULL, *eefile = NULL;
  uint32_t freq = 16000000;
  int verbose = 0, c;
  while ((c = getopt(argc, argv, "m:f:l:e:Rv")) != -1) switch (c) {
      case 'm': mcu = optarg; break;
      case 'f': freq = strtoul(optarg, NULL, 0); break;
      case 'l': link = optarg; break;
      case 'e': eefile = optarg; break;
      case 'R': realtime = 0; break;
      case 'v': verbose = 1; break;
      default:
        fprintf(stderr, "usage: %s -l link [-e eeprom.bin] [-m mcu] [-f hz] [-R] [-v] fw.elf|fw.hex\n", argv[0]);
        return 2;
    }
  if (optind >= argc || !link) {
    fprintf(stderr, "simbmc: need -l LINK and a firmware file\n");
    return 2;
  }
  const char *fw = argv[optind];
  pid_t parent = getppid();

  elf_firmware_t f;
  memset(&f, 0, sizeof f);
  size_t n = strlen(fw);
  if (n > 4 && !strcmp(fw + n - 4, ".hex")) {
    ihex_chunk_p chunk = NULL;
    int cnt = read_ihex_chunks(fw, &chunk);
    if (cnt <= 0) {
      fprintf(stderr, "simbmc: cannot read %s\n", fw);
      return 1;
    }
    for (int ci = 0; ci < cnt; ci++)
      if (chunk[ci].baseaddr < (1 * 1024 * 1024)) {
        f.flash = chunk[ci].data;
        f.flashsize = chunk[ci].size;
        f.flashbase = chunk[ci].baseaddr;
        break;
      }
  } else if (elf_read_firmware(fw, &f) != 0) {
    fprintf(stderr, "simbmc: cannot read %s\n", fw);
    return 1;
  }
  if (!f.mmcu[0]) strncpy(f.mmcu, mcu, sizeof f.mmcu - 1);
  if (!f.frequency) f.frequency = freq;

  avr_t *avr = avr_make_mcu_by_name(f.mmcu);
  if (!avr) {
    fprintf(stderr, "simbmc: unknown mcu %s\n", f.mmcu);
    return 1;
  }
  avr_init(avr);
  avr_load_firmware(avr, &f);
  avr->log = verbose ? LOG_TRACE : LOG_NONE;
  avr->sleep = rt_sleep;
  if (eefile && ee_open(avr, eefile) != 0) return 1;

  uart_pty_init(avr, &uart_pty);
  uart_pty_connect(&uart_pty, '0');
  /* simavr makes only the master raw; the slave starts cooked with ECHO, which
   * would bounce the firmware's output back into its RX before a host opens
   * the port. */
  int s = open(uart_pty.pty.slavename, O_RDWR | O_NOCTTY);
  if (s >= 0) {
    struct termios t;
    tcgetattr(s, &t);
    cfmakeraw(&t);
    tcsetattr(s, TCSANOW, &t);
    close(s);
  }
  /* simavr hard-codes /tmp/simavr-uart0; remove it when it is ours. */
  char buf[128];
  ssize_t r = readlink("/tmp/simavr-uart0", buf, sizeof buf - 1);
  if (r > 0) {
    buf[r] = 0;
    if (!strcmp(buf, uart_pty.pty.slavename)) unlink("/tmp/simavr-uart0");
  }
  unlink(link);
  if (symlink(uart_pty.pty.slavename, link)) {
    fprintf(stderr, "simbmc: symlink %s: %s\n", link, strerror(errno));
    return 1;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  printf("PTY %s\n", uart_pty.pty.slavename);
  fflush(stdout);

  clock_gettime(CLOCK_MONOTONIC, &t0);
  int state = cpu_Running;
  unsigned long it = 0;
  while (!stop && state != cpu_Done && state != cpu_Crashed) {
    state = avr_run(avr);
    if ((++it & 0x3ff) == 0) {
      if (realtime && (it & 0x3fff) == 0) sync_wall(avr, avr->cycle);
      ee_sync();
      if (getppid() != parent) break;
    }
  }
  ee_sync();
  if (verbose) {
    double w = wall_ns() / 1e9, sim = (double)avr->cycle / avr->frequency;
    fprintf(stderr, "simbmc: exit state=%d sim=%.3fs wall=%.3fs\n", state, sim, w);
  }
  /* uart_pty_stop() in Debian's simavr 1.6 can hang in pthread_join; the
   * kernel closes the pty when we exit. */
  unlink(link);
  fflush(NULL);
  _exit(state == cpu_Crashed ? 3 : 0);
}

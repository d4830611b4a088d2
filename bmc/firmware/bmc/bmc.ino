// llmswarm BMC firmware: the swarm's authoritative liveness and partition
// tables, kept by an Arduino Uno (ATmega328P, 16 MHz) on its own clock and
// dumped on request with an HMAC-SHA256 over a host nonce.
//
// Line protocol on UART0, 115200 8N1: see bmc/PROTOCOL.md. In short: one
// request line (<= 63 bytes including LF, the size of the Uno's receive
// ring) gets exactly one reply line (TAB: a block of lines ending in "S ..."
// or one ERR line). Every reply line is at most 62 characters plus CRLF.
//
// No heap: every table is a fixed array. Limits: MAX_NODES, MAX_PARTS.
#include <Arduino.h>
#include <avr/eeprom.h>
#include <avr/pgmspace.h>
#include <avr/sleep.h>
#include <avr/wdt.h>
#include "sha256.h"

#define FW_VERSION "1.0.0"
#define PROTO_VERSION 1
#ifndef BMC_BAUD
#define BMC_BAUD 115200
#endif
#ifndef MAX_NODES
#define MAX_NODES 32
#endif
#ifndef MAX_PARTS
#define MAX_PARTS 32
#endif
#define HLEN 6          // handle bytes (12 hex chars on the wire)
#define LINE_CAP 62     // request characters before LF (63 bytes on the wire)
#define OUT_CAP 62      // reply characters before CRLF
#define MAX_ARGS 6
#define NONCE_MIN 16
#define NONCE_MAX 32
#define TOKEN_MAX 16

// EEPROM layout (documented in PROTOCOL.md).
#define EE_BOOT ((uint32_t *)0)   // u32 boot counter, little endian
#define EE_KEYFLAG ((uint8_t *)4) // KEY_MAGIC once a key is provisioned
#define EE_KEY ((uint8_t *)8)     // 32-byte HMAC key
#define KEY_MAGIC 0x5A

#define ST_FREE 0
#define ST_LIVE 1
#define ST_DEAD 2
#define DEFAULT_PERIOD_MS 3000
#define DEFAULT_MISSES 2
#define AGE_CAP 0x7FFFFFFFUL

struct Node {
  uint8_t h[HLEN];
  uint32_t last;  // millis() of the last heartbeat
  uint8_t load;
  uint8_t state;
};
struct Part {
  uint8_t node[HLEN];
  uint8_t model[HLEN];
  uint16_t a, b;  // layers [a,b); b == 0 marks a free slot
};

static Node nodes[MAX_NODES];
static Part parts[MAX_PARTS];
static uint32_t seq;  // +1 on every mutation, liveness transitions included
static uint32_t boot;
static uint16_t periodMs = DEFAULT_PERIOD_MS;
static uint8_t misses = DEFAULT_MISSES;
static uint32_t upHi, lastMs;  // 64-bit uptime from the 32-bit millis()
static uint32_t lastSweep;
static uint32_t macMicros;     // time spent in HMAC during the last TAB

static char line[LINE_CAP + 1];
static uint8_t llen;
static bool lineLong, lineBadChar;

static char ob[OUT_CAP + 1];
static uint8_t on;

// ---- output -------------------------------------------------------------

static void oreset() { on = 0; }
static void oc(char c) { if (on < OUT_CAP) ob[on++] = c; }
static void os(const char *s) { while (*s) oc(*s++); }
static void osP(PGM_P s) { char c; while ((c = pgm_read_byte(s++))) oc(c); }
static void ou32(uint32_t v) { char b[11]; ultoa(v, b, 10); os(b); }
// ou64 prints hi:lo in decimal by long division over 16-bit digits, which
// avoids pulling avr-gcc's 64-bit division into flash.
static void ou64(uint32_t hi, uint32_t lo) {
  uint16_t w[4] = {(uint16_t)(hi >> 16), (uint16_t)hi, (uint16_t)(lo >> 16), (uint16_t)lo};
  char b[21];
  uint8_t i = 20, nz;
  b[20] = 0;
  do {
    uint32_t r = 0;
    nz = 0;
    for (uint8_t k = 0; k < 4; k++) {
      uint32_t cur = (r << 16) | w[k];
      w[k] = cur / 10;
      r = cur % 10;
      nz |= w[k] != 0;
    }
    b[--i] = '0' + r;
  } while (nz);
  os(b + i);
}
static void ohex(const uint8_t *p, uint8_t n) {
  static const char hx[] PROGMEM = "0123456789abcdef";
  for (uint8_t i = 0; i < n; i++) {
    oc(pgm_read_byte(&hx[p[i] >> 4]));
    oc(pgm_read_byte(&hx[p[i] & 15]));
  }
}
static const char b64[] PROGMEM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
// ob64 writes base64url without padding (RFC 4648 section 5).
static void ob64(const uint8_t *p, uint8_t n) {
  uint8_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = ((uint32_t)p[i] << 16) | ((uint16_t)p[i + 1] << 8) | p[i + 2];
    for (int8_t s = 18; s >= 0; s -= 6) oc(pgm_read_byte(&b64[(v >> s) & 63]));
  }
  if (n - i == 1) {
    oc(pgm_read_byte(&b64[p[i] >> 2]));
    oc(pgm_read_byte(&b64[(p[i] & 3) << 4]));
  } else if (n - i == 2) {
    uint16_t v = ((uint16_t)p[i] << 8) | p[i + 1];
    oc(pgm_read_byte(&b64[v >> 10]));
    oc(pgm_read_byte(&b64[(v >> 4) & 63]));
    oc(pgm_read_byte(&b64[(v & 15) << 2]));
  }
}
// osend sends the reply buffer as one CRLF-terminated line; with h it also
// feeds the line, LF-terminated, to the table MAC.
static void osend(hmac_sha256_ctx *h) {
  if (h) {
    uint32_t t0 = micros();
    hmac_sha256_update(h, ob, on);
    hmac_sha256_update(h, "\n", 1);
    macMicros += micros() - t0;
  }
  Serial.write((const uint8_t *)ob, on);
  Serial.write('\r');
  Serial.write('\n');
  oreset();
}
static void replyErr(PGM_P code) { oreset(); osP(PSTR("ERR ")); osP(code); osend(0); }
static void replyOK() { oreset(); osP(PSTR("OK ")); ou32(seq); osend(0); }

// ---- clock ----------------------------------------------------------------

static uint32_t nowMs() {
  uint32_t m = millis();
  if (m < lastMs) upHi++;  // called at least every few ms, so no wrap is missed
  lastMs = m;
  return m;
}

// ---- input parsing ----------------------------------------------------------

static int8_t hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is refused: handles have one spelling
}
static bool parseHandle(const char *s, uint8_t *out) {
  for (uint8_t i = 0; i < HLEN; i++) {
    int8_t hi = hexval(s[2 * i]);
    if (hi < 0) return false;
    int8_t lo = hexval(s[2 * i + 1]);
    if (lo < 0) return false;
    out[i] = (hi << 4) | lo;
  }
  return s[2 * HLEN] == 0;
}
// parseNum: decimal digits only, no sign. Returns 0 on syntax error,
// 1 on success, 2 when the value does not fit in 32 bits.
static uint8_t parseNum(const char *s, uint32_t *out) {
  uint32_t v = 0;
  bool big = false;
  uint8_t n = 0;
  for (; *s; s++, n++) {
    if (*s < '0' || *s > '9') return 0;
    uint8_t d = *s - '0';
    if (big) continue;
    if (v > 429496729UL || (v == 429496729UL && d > 5)) big = true;
    else v = v * 10 + d;
  }
  if (n == 0) return 0;
  if (big) return 2;
  *out = v;
  return 1;
}
static int8_t b64val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}
static bool isToken(const char *s, uint8_t minLen, uint8_t maxLen) {
  uint8_t n = 0;
  for (; *s; s++, n++)
    if (b64val(*s) < 0) return false;
  return n >= minLen && n <= maxLen;
}
// parseKey decodes exactly 43 base64url characters into 32 bytes; the two
// unused low bits of the last character must be zero (one spelling per key).
static bool parseKey(const char *s, uint8_t *k) {
  if (strlen(s) != 43) return false;
  uint32_t acc = 0;
  uint8_t bits = 0, n = 0;
  for (uint8_t i = 0; i < 43; i++) {
    int8_t v = b64val(s[i]);
    if (v < 0) return false;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      k[n++] = acc >> bits;
      acc &= (1UL << bits) - 1;
    }
  }
  return n == 32 && acc == 0;
}

// ---- tables -----------------------------------------------------------------

static int8_t findNode(const uint8_t *h) {
  for (uint8_t i = 0; i < MAX_NODES; i++)
    if (nodes[i].state != ST_FREE && !memcmp(nodes[i].h, h, HLEN)) return i;
  return -1;
}
static int8_t findPart(const uint8_t *n, const uint8_t *m) {
  for (uint8_t i = 0; i < MAX_PARTS; i++)
    if (parts[i].b && !memcmp(parts[i].node, n, HLEN) && !memcmp(parts[i].model, m, HLEN)) return i;
  return -1;
}
static uint8_t countNodes() {
  uint8_t c = 0;
  for (uint8_t i = 0; i < MAX_NODES; i++) c += nodes[i].state != ST_FREE;
  return c;
}
static uint8_t countParts() {
  uint8_t c = 0;
  for (uint8_t i = 0; i < MAX_PARTS; i++) c += parts[i].b != 0;
  return c;
}

// sweep declares dead every live node silent for more than misses*period and
// pins the age of long-dead nodes so millis() wrapping never revives them.
// It returns the time it judged at: a table reported at that time never
// shows a live node older than the limit (a millisecond read later could).
static uint32_t sweep() {
  uint32_t t = nowMs(), lim = (uint32_t)periodMs * misses;
  for (uint8_t i = 0; i < MAX_NODES; i++) {
    Node &n = nodes[i];
    if (n.state == ST_FREE) continue;
    uint32_t age = t - n.last;
    if (n.state == ST_LIVE && age > lim) {
      n.state = ST_DEAD;
      seq++;
    } else if (n.state == ST_DEAD && age > AGE_CAP) {
      n.last = t - AGE_CAP;
    }
  }
  lastSweep = t;
  return t;
}

static bool provisioned() { return eeprom_read_byte(EE_KEYFLAG) == KEY_MAGIC; }

// Stack painting: free RAM is measured as the bytes between the end of .bss
// and the deepest stack use so far (no heap is ever used).
extern uint8_t __heap_start;
#define PAINT 0xC5
static void paintStack() {
  uint8_t *p = &__heap_start;
  uint8_t *sp = (uint8_t *)SP;
  while (p < sp - 16) *p++ = PAINT;
}
static uint16_t freeRam() {
  const uint8_t *p = &__heap_start;
  uint16_t n = 0;
  while (p[n] == PAINT && p + n < (uint8_t *)SP) n++;
  return n;
}

// ---- commands -----------------------------------------------------------------

static void cmdPing(uint8_t argc, char **argv) {
  if (argc > 2 || (argc == 2 && !isToken(argv[1], 1, TOKEN_MAX))) return replyErr(PSTR("arg"));
  uint32_t lo = nowMs();
  oreset();
  osP(PSTR("PONG "));
  ou64(upHi, lo);
  if (argc == 2) { oc(' '); os(argv[1]); }
  osend(0);
}

static void cmdInfo(uint8_t argc) {
  if (argc != 1) return replyErr(PSTR("arg"));
  oreset();
  osP(PSTR("INFO proto=")); ou32(PROTO_VERSION);
  osP(PSTR(" fw=" FW_VERSION " boot=")); ou32(boot);
  osP(PSTR(" key=")); oc(provisioned() ? '1' : '0');
  osP(PSTR(" nmax=")); ou32(MAX_NODES);
  osP(PSTR(" pmax=")); ou32(MAX_PARTS);
  osend(0);
}

static void cmdStat(uint8_t argc) {
  if (argc != 1) return replyErr(PSTR("arg"));
  sweep();
  oreset();
  osP(PSTR("STAT seq=")); ou32(seq);
  osP(PSTR(" n=")); ou32(countNodes());
  osP(PSTR(" p=")); ou32(countParts());
  osP(PSTR(" ram=")); ou32(freeRam());
  osP(PSTR(" mac=")); ou32(macMicros);
  osend(0);
}

static void cmdCfg(uint8_t argc, char **argv) {
  if (argc == 1) {
    oreset();
    osP(PSTR("CFG ")); ou32(periodMs); oc(' '); ou32(misses);
    return osend(0);
  }
  if (argc != 3) return replyErr(PSTR("arg"));
  uint32_t p, m;
  uint8_t rp = parseNum(argv[1], &p), rm = parseNum(argv[2], &m);
  if (!rp || !rm) return replyErr(PSTR("arg"));
  if (rp != 1 || rm != 1 || p < 100 || p > 65535 || m < 1 || m > 255) return replyErr(PSTR("range"));
  periodMs = p;
  misses = m;
  seq++;
  sweep();
  replyOK();
}

static void cmdHB(uint8_t argc, char **argv) {
  uint8_t h[HLEN];
  uint32_t load = 0;
  if (argc < 2 || argc > 3 || !parseHandle(argv[1], h)) return replyErr(PSTR("arg"));
  if (argc == 3) {
    uint8_t r = parseNum(argv[2], &load);
    if (!r) return replyErr(PSTR("arg"));
    if (r != 1 || load > 255) return replyErr(PSTR("range"));
  }
  sweep();
  int8_t i = findNode(h);
  if (i < 0) {
    for (i = 0; i < MAX_NODES && nodes[i].state != ST_FREE; i++) {}
    if (i >= MAX_NODES) return replyErr(PSTR("full"));
    memcpy(nodes[i].h, h, HLEN);
  }
  nodes[i].last = nowMs();
  nodes[i].load = load;
  nodes[i].state = ST_LIVE;
  seq++;
  replyOK();
}

static void cmdNDel(uint8_t argc, char **argv) {
  uint8_t h[HLEN];
  if (argc != 2 || !parseHandle(argv[1], h)) return replyErr(PSTR("arg"));
  int8_t i = findNode(h);
  if (i < 0) return replyErr(PSTR("notfound"));
  nodes[i].state = ST_FREE;
  seq++;
  replyOK();
}

static void cmdNClr(uint8_t argc) {
  if (argc != 1) return replyErr(PSTR("arg"));
  for (uint8_t i = 0; i < MAX_NODES; i++) nodes[i].state = ST_FREE;
  seq++;
  replyOK();
}

static void cmdPSet(uint8_t argc, char **argv) {
  uint8_t n[HLEN], m[HLEN];
  uint32_t a, b;
  if (argc != 5 || !parseHandle(argv[1], n) || !parseHandle(argv[2], m)) return replyErr(PSTR("arg"));
  uint8_t ra = parseNum(argv[3], &a), rb = parseNum(argv[4], &b);
  if (!ra || !rb) return replyErr(PSTR("arg"));
  if (ra != 1 || rb != 1 || b > 65535 || a >= b) return replyErr(PSTR("range"));
  int8_t i = findPart(n, m);
  if (i < 0) {
    for (i = 0; i < MAX_PARTS && parts[i].b; i++) {}
    if (i >= MAX_PARTS) return replyErr(PSTR("full"));
    memcpy(parts[i].node, n, HLEN);
    memcpy(parts[i].model, m, HLEN);
  }
  parts[i].a = a;
  parts[i].b = b;
  seq++;
  replyOK();
}

static void cmdPDel(uint8_t argc, char **argv) {
  uint8_t n[HLEN], m[HLEN];
  if (argc != 3 || !parseHandle(argv[1], n) || !parseHandle(argv[2], m)) return replyErr(PSTR("arg"));
  int8_t i = findPart(n, m);
  if (i < 0) return replyErr(PSTR("notfound"));
  parts[i].b = 0;
  seq++;
  replyOK();
}

static void cmdPClr(uint8_t argc) {
  if (argc != 1) return replyErr(PSTR("arg"));
  for (uint8_t i = 0; i < MAX_PARTS; i++) parts[i].b = 0;
  seq++;
  replyOK();
}

// cmdTab dumps the tables. MAC = HMAC-SHA256(key, "bmc/1 " nonce "\n" +
// every dump line before the S line, each terminated by "\n").
static void cmdTab(uint8_t argc, char **argv) {
  if (argc != 2 || !isToken(argv[1], NONCE_MIN, NONCE_MAX)) return replyErr(PSTR("arg"));
  if (!provisioned()) return replyErr(PSTR("nokey"));
  hmac_sha256_ctx h;
  uint8_t mac[32];
  {
    uint8_t key[32];
    eeprom_read_block(key, EE_KEY, 32);
    macMicros = 0;
    uint32_t t0 = micros();
    hmac_sha256_init(&h, key, 32);
    memset(key, 0, sizeof key);
    hmac_sha256_update(&h, "bmc/1 ", 6);
    hmac_sha256_update(&h, argv[1], strlen(argv[1]));
    hmac_sha256_update(&h, "\n", 1);
    macMicros += micros() - t0;
  }
  uint32_t t = sweep();
  oreset();
  osP(PSTR("T ")); ou32(boot); oc(' '); ou32(seq); oc(' '); ou64(upHi, t);
  oc(' '); ou32(periodMs); oc(' '); ou32(misses);
  osend(&h);
  for (uint8_t i = 0; i < MAX_NODES; i++) {
    const Node &n = nodes[i];
    if (n.state == ST_FREE) continue;
    osP(PSTR("N ")); ohex(n.h, HLEN);
    osP(n.state == ST_LIVE ? PSTR(" L ") : PSTR(" D "));
    ou32(t - n.last); oc(' '); ou32(n.load);
    osend(&h);
    wdt_reset();
  }
  for (uint8_t i = 0; i < MAX_PARTS; i++) {
    const Part &p = parts[i];
    if (!p.b) continue;
    osP(PSTR("P ")); ohex(p.node, HLEN); oc(' '); ohex(p.model, HLEN);
    oc(' '); ou32(p.a); oc(' '); ou32(p.b);
    osend(&h);
    wdt_reset();
  }
  uint32_t t0 = micros();
  hmac_sha256_final(&h, mac);
  macMicros += micros() - t0;
  osP(PSTR("S ")); ob64(mac, 32);
  osend(0);
}

// cmdKey provisions the HMAC key once. The flag byte is written after the
// key and read back, so a power cut mid-write leaves the board unprovisioned.
static void cmdKey(uint8_t argc, char **argv) {
  uint8_t k[32];
  if (argc != 2 || !parseKey(argv[1], k)) return replyErr(PSTR("arg"));
  if (provisioned()) return replyErr(PSTR("provisioned"));
  for (uint8_t i = 0; i < 32; i++) {
    eeprom_update_byte(EE_KEY + i, k[i]);
    wdt_reset();
  }
  bool ok = true;
  for (uint8_t i = 0; i < 32; i++) ok &= eeprom_read_byte(EE_KEY + i) == k[i];
  memset(k, 0, sizeof k);
  if (!ok) return replyErr(PSTR("eeprom"));
  eeprom_update_byte(EE_KEYFLAG, KEY_MAGIC);
  replyOK();
}

static void handle() {
  if (lineLong) return replyErr(PSTR("toolong"));
  if (lineBadChar) return replyErr(PSTR("char"));
  char *argv[MAX_ARGS + 1];
  uint8_t argc = 0;
  for (char *p = strtok(line, " "); p; p = strtok(NULL, " ")) {
    if (argc > MAX_ARGS) break;
    argv[argc++] = p;
  }
  if (argc == 0) return replyErr(PSTR("empty"));
  const char *c = argv[0];
  if (!strcmp_P(c, PSTR("PING"))) cmdPing(argc, argv);
  else if (!strcmp_P(c, PSTR("HB"))) cmdHB(argc, argv);
  else if (!strcmp_P(c, PSTR("TAB"))) cmdTab(argc, argv);
  else if (!strcmp_P(c, PSTR("PSET"))) cmdPSet(argc, argv);
  else if (!strcmp_P(c, PSTR("PDEL"))) cmdPDel(argc, argv);
  else if (!strcmp_P(c, PSTR("PCLR"))) cmdPClr(argc);
  else if (!strcmp_P(c, PSTR("NDEL"))) cmdNDel(argc, argv);
  else if (!strcmp_P(c, PSTR("NCLR"))) cmdNClr(argc);
  else if (!strcmp_P(c, PSTR("CFG"))) cmdCfg(argc, argv);
  else if (!strcmp_P(c, PSTR("INFO"))) cmdInfo(argc);
  else if (!strcmp_P(c, PSTR("STAT"))) cmdStat(argc);
  else if (!strcmp_P(c, PSTR("KEY"))) cmdKey(argc, argv);
  else replyErr(PSTR("unknown"));
}

void setup() {
  MCUSR = 0;
  wdt_disable();
  paintStack();
  uint32_t b = eeprom_read_dword(EE_BOOT);
  if (b == 0xFFFFFFFFUL) b = 0;  // blank EEPROM
  boot = b + 1;
  if (boot == 0xFFFFFFFFUL) boot = 1;
  eeprom_update_dword(EE_BOOT, boot);
  Serial.begin(BMC_BAUD);
  oreset();
  osP(PSTR("READY fw=" FW_VERSION " boot=")); ou32(boot);
  osend(0);
  wdt_enable(WDTO_2S);
}

void loop() {
  wdt_reset();
  while (Serial.available()) {
    char ch = Serial.read();
    if (ch == '\r') continue;
    if (ch == '\n') {
      line[llen] = 0;
      handle();
      llen = 0;
      lineLong = lineBadChar = false;
      continue;
    }
    if ((uint8_t)ch < 0x20 || (uint8_t)ch >= 0x7F) lineBadChar = true;
    if (llen < LINE_CAP) line[llen++] = ch;
    else lineLong = true;
  }
  if (nowMs() - lastSweep >= 10) sweep();
  // Idle until the next interrupt: a received byte or the 1 ms timer tick.
  cli();
  if (!Serial.available()) {
    set_sleep_mode(SLEEP_MODE_IDLE);
    sleep_enable();
    sei();
    sleep_cpu();
    sleep_disable();
  }
  sei();
}

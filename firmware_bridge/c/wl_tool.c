/* Test driver for walklab_proto.h: one command per stdin line, one answer line on stdout (hex).
 *
 *   crc HEX                          -> CRC as 4 hex digits
 *   cobs_enc HEX | cobs_dec HEX      -> HEX, or "ERR <code>"
 *   frame_enc TYPE SEQ ACK T HEX     -> wire bytes (COBS + 0x00)          (numbers in decimal)
 *   frame_dec HEX                    -> "TYPE SEQ ACK T HEX" or "ERR <code>" (HEX without delimiter)
 *   stream HEX                       -> each decoded frame "TYPE SEQ ACK T HEX" then "END <rejected>"
 *   pack state N (count vel cur flags)*N | pack command N (mode f32bits)*N
 *   pack config motor kp ki kd imax vmax wd hz   (floats as f32 bit patterns in decimal)
 *   pack heartbeat S | pack ack SEQ TYPE | pack nack SEQ TYPE ERR | pack estop R | pack log LEVEL HEXTEXT
 *   pack force N bits*N | pack caps fw0 fw1 fw2 nforce hb N cpr*N NR rate*NR HEXNAME
 *   unpack command HEX -> "N (mode bits)*N" ;  unpack config HEX -> the 8 fields as for pack
 *   unpack heartbeat HEX -> status ;  unpack estop HEX -> reason     (errors: "ERR -1")
 *   bench N                          -> "encode_ns X decode_ns Y": mean per 8-motor STATE frame (bench/bridge.py)
 * Input lines longer than the buffers, or counts above 64, answer "ERR input" (never overflow).
 * Build: cc -std=c99 -Wall -Wextra -Werror -O2 -o wl_tool wl_tool.c
 * (the tests build it with -fsanitize=address,undefined as well)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "walklab_proto.h"

#define BUF 65536
#define MAX_MOTORS 64
static int bad_input;

/* Hex digits up to the next blank into out (capacity BUF); flags bad_input instead of overflowing. */
static size_t unhex(const char *s, uint8_t *out) {
    size_t n = 0;
    while (s[0] && s[1] && s[0] != ' ' && s[0] != '\n') {
        unsigned v;
        if (n == BUF || sscanf(s, "%2x", &v) != 1) { bad_input = 1; return 0; }
        out[n++] = (uint8_t)v; s += 2;
    }
    return n;
}

static int count(long m) { if (m < 0 || m > MAX_MOTORS) { bad_input = 1; return 0; } return (int)m; }

static void puthex(const uint8_t *p, size_t n) { for (size_t i = 0; i < n; i++) printf("%02x", p[i]); }

static float bits_f32(unsigned long b) { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }
static unsigned long f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static char *tok(char **s) { return strtok_r(NULL, " \n", s); }
static long num(char **s) { char *t = tok(s); return t ? strtol(t, NULL, 10) : 0; }

static void print_frame(const wl_frame *f) {
    printf("%u %u %u %lu ", f->type, f->seq, f->ack, (unsigned long)f->t_us);
    puthex(f->payload, f->len);
    printf("\n");
}

int main(void) {
    static char line[2 * BUF + 256];
    static uint8_t a[BUF], b[2 * BUF];
    while (fgets(line, sizeof line, stdin)) {
        char *save;
        bad_input = strchr(line, '\n') == NULL && !feof(stdin); /* line cut by the buffer */
        char *cmd = strtok_r(line, " \n", &save);
        if (!cmd) continue;
        if (!strcmp(cmd, "pack")) {
            char *what = tok(&save);
            size_t n = 0;
            if (!what) { printf("ERR input\n"); fflush(stdout); continue; }
            if (!strcmp(what, "state")) {
                int m = count(num(&save));
                wl_motor_state s[MAX_MOTORS];
                for (int i = 0; i < m; i++) {
                    s[i].count = (int32_t)num(&save); s[i].vel = (int16_t)num(&save);
                    s[i].current_ma = (int16_t)num(&save); s[i].flags = (uint8_t)num(&save);
                }
                n = wl_pack_state(a, s, m);
            } else if (!strcmp(what, "command")) {
                int m = count(num(&save));
                wl_motor_command c[MAX_MOTORS];
                for (int i = 0; i < m; i++) { c[i].mode = (uint8_t)num(&save); c[i].setpoint = bits_f32((unsigned long)num(&save)); }
                n = wl_pack_command(a, c, m);
            } else if (!strcmp(what, "config")) {
                wl_config c;
                c.motor = (uint8_t)num(&save);
                c.kp = bits_f32((unsigned long)num(&save)); c.ki = bits_f32((unsigned long)num(&save));
                c.kd = bits_f32((unsigned long)num(&save)); c.max_current = bits_f32((unsigned long)num(&save));
                c.max_velocity = bits_f32((unsigned long)num(&save));
                c.watchdog_ms = (uint16_t)num(&save); c.stream_hz = (uint16_t)num(&save);
                n = wl_pack_config(a, &c);
            } else if (!strcmp(what, "heartbeat")) {
                n = wl_pack_heartbeat(a, (uint16_t)num(&save));
            } else if (!strcmp(what, "ack")) {
                long s = num(&save); n = wl_pack_ack(a, (uint16_t)s, (uint8_t)num(&save));
            } else if (!strcmp(what, "nack")) {
                long s = num(&save); long t = num(&save); n = wl_pack_nack(a, (uint16_t)s, (uint8_t)t, (uint8_t)num(&save));
            } else if (!strcmp(what, "estop")) {
                n = wl_pack_estop(a, (uint8_t)num(&save));
            } else if (!strcmp(what, "log")) {
                long level = num(&save); char *h = tok(&save);
                size_t k = h ? unhex(h, b) : 0;
                n = wl_pack_log(a, (uint8_t)level, (const char *)b, k);
            } else if (!strcmp(what, "force")) {
                int m = count(num(&save)); float ch[8] = {0};
                for (int i = 0; i < m && i < 8; i++) ch[i] = bits_f32((unsigned long)num(&save));
                n = wl_pack_force(a, ch, m);
            } else if (!strcmp(what, "caps")) {
                wl_caps c; uint32_t cpr[256]; uint16_t rates[256]; static char name[BUF];
                c.fw[0] = (uint8_t)num(&save); c.fw[1] = (uint8_t)num(&save); c.fw[2] = (uint8_t)num(&save);
                c.n_force = (uint8_t)num(&save); c.heartbeat_hz = (uint16_t)num(&save);
                c.n_motors = (uint8_t)num(&save);
                for (int i = 0; i < c.n_motors; i++) cpr[i] = (uint32_t)num(&save);
                c.n_rates = (uint8_t)num(&save);
                for (int i = 0; i < c.n_rates; i++) rates[i] = (uint16_t)num(&save);
                char *h = tok(&save);
                size_t k = h ? unhex(h, (uint8_t *)name) : 0;
                if (k > 255) bad_input = 1;
                c.name_len = (uint8_t)k;
                c.cpr = cpr; c.rates = rates; c.name = name;
                n = wl_pack_caps(a, &c);
            } else {
                printf("ERR unknown message %s\n", what);
                continue;
            }
            if (bad_input) { printf("ERR input\n"); continue; }
            puthex(a, n); printf("\n");
        } else if (!strcmp(cmd, "unpack")) {
            char *what = tok(&save); char *h = tok(&save);
            size_t n = h ? unhex(h, a) : 0;
            if (!what || bad_input) { printf("ERR input\n"); fflush(stdout); continue; }
            if (!strcmp(what, "command")) {
                wl_motor_command c[64];
                int m = wl_unpack_command(a, n, c, 64);
                if (m < 0) { printf("ERR -1\n"); continue; }
                printf("%d", m);
                for (int i = 0; i < m; i++) printf(" %u %lu", c[i].mode, f32_bits(c[i].setpoint));
                printf("\n");
            } else if (!strcmp(what, "heartbeat")) {
                uint16_t st;
                if (wl_unpack_heartbeat(a, n, &st)) printf("ERR -1\n"); else printf("%u\n", st);
            } else if (!strcmp(what, "estop")) {
                uint8_t r;
                if (wl_unpack_estop(a, n, &r)) printf("ERR -1\n"); else printf("%u\n", r);
            } else if (!strcmp(what, "config")) {
                wl_config c;
                if (wl_unpack_config(a, n, &c)) { printf("ERR -1\n"); continue; }
                printf("%u %lu %lu %lu %lu %lu %u %u\n", c.motor, f32_bits(c.kp), f32_bits(c.ki), f32_bits(c.kd),
                       f32_bits(c.max_current), f32_bits(c.max_velocity), c.watchdog_ms, c.stream_hz);
            } else {
                printf("ERR unknown message %s\n", what);
            }
        } else if (!strcmp(cmd, "bench")) {
            long n = num(&save);
            wl_motor_state s[8] = {{0, 0, 0, 0}};
            uint8_t payload[8 * WL_STATE_MOTOR_SIZE];
            static uint8_t wire[64 * 1024 * 8];
            size_t off = 0, frames = 0;
            struct timespec t0, t1, t2;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (long k = 0; k < n; k++) {
                for (int i = 0; i < 8; i++) { s[i].count = (int32_t)(k * (i + 1)); s[i].vel = (int16_t)k; s[i].flags = 0xC1; }
                size_t len = wl_pack_state(payload, s, 8);
                if (off + WL_MAX_ENCODED + 1 > sizeof wire) off = 0;
                off += wl_frame_encode(WL_STATE, (uint16_t)k, 0, (uint32_t)k * 1000u, payload, (uint16_t)len, wire + off);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            static wl_decoder d; wl_decoder_init(&d); wl_frame f;
            for (size_t i = 0; i < off; i++) frames += wl_decoder_push(&d, wire[i], &f) == 1;
            clock_gettime(CLOCK_MONOTONIC, &t2);
            double enc = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)n;
            double dec = ((double)(t2.tv_sec - t1.tv_sec) * 1e9 + (double)(t2.tv_nsec - t1.tv_nsec))
                         / (double)(frames ? frames : 1);
            printf("encode_ns %.1f decode_ns %.1f frames %zu\n", enc, dec, frames);
        } else if (!strcmp(cmd, "frame_enc")) {
            long t = num(&save), s = num(&save), k = num(&save);
            char *u = tok(&save);
            unsigned long us = u ? strtoul(u, NULL, 10) : 0;
            char *h = tok(&save);
            size_t n = h ? unhex(h, a) : 0;
            if (!u || bad_input || n > WL_MAX_PAYLOAD) { printf("ERR input\n"); fflush(stdout); continue; }
            size_t m = wl_frame_encode((uint8_t)t, (uint16_t)s, (uint16_t)k, (uint32_t)us, a, (uint16_t)n, b);
            puthex(b, m); printf("\n");
        } else {
            char *h = tok(&save);
            size_t n = h ? unhex(h, a) : 0;
            if (bad_input) { printf("ERR input\n"); fflush(stdout); continue; }
            if (!strcmp(cmd, "crc")) {
                printf("%04x\n", wl_crc16(a, n));
            } else if (!strcmp(cmd, "cobs_enc")) {
                size_t m = wl_cobs_encode(a, n, b); puthex(b, m); printf("\n");
            } else if (!strcmp(cmd, "cobs_dec")) {
                int m = wl_cobs_decode(a, n, b, sizeof b);
                if (m < 0) printf("ERR %d\n", m); else { puthex(b, (size_t)m); printf("\n"); }
            } else if (!strcmp(cmd, "frame_dec")) {
                wl_frame f;
                int r = wl_frame_decode(a, n, b, &f);
                if (r) printf("ERR %d\n", r); else print_frame(&f);
            } else if (!strcmp(cmd, "stream")) {
                static wl_decoder d; wl_decoder_init(&d);
                int rejected = 0; wl_frame f;
                for (size_t i = 0; i < n; i++) {
                    int r = wl_decoder_push(&d, a[i], &f);
                    if (r == 1) print_frame(&f); else if (r < 0) rejected++;
                }
                printf("END %d\n", rejected);
            } else {
                printf("ERR unknown command %s\n", cmd);
            }
        }
        fflush(stdout);
    }
    return 0;
}

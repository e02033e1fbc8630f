/* walklab wire protocol v1 -- header-only C reference for MCU firmware (C99, no allocation).
 *
 * Normative text: docs/protocol.md. Frame on the wire:
 *   COBS( ver:u8 | type:u8 | seq:u16 | ack:u16 | t_us:u32 | len:u16 | payload[len] | crc:u16be ) 0x00
 * header and payload little-endian; crc = CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no
 * reflection, xorout 0, check 0x29B1) over header + payload, appended most significant byte first
 * (so every error burst of <= 16 bits is detected). Checked against the Python implementation with
 * the shared vectors in tests/vectors/ by tests/firmware_bridge/test_vectors.py.
 */
#ifndef WALKLAB_PROTO_H
#define WALKLAB_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WL_PROTOCOL_VERSION 1
#define WL_HEADER_SIZE 12
#define WL_CRC_SIZE 2
#define WL_MAX_PAYLOAD 1024
#define WL_MAX_FRAME (WL_HEADER_SIZE + WL_MAX_PAYLOAD + WL_CRC_SIZE)
#define WL_MAX_ENCODED (WL_MAX_FRAME + WL_MAX_FRAME / 254 + 2)

enum wl_type {
    WL_HELLO = 0x01, WL_CAPS = 0x02, WL_HEARTBEAT = 0x03,
    WL_STATE = 0x10, WL_COMMAND = 0x11, WL_CONFIG = 0x12, WL_ESTOP = 0x13, WL_RESET = 0x14,
    WL_ACK = 0x20, WL_NACK = 0x21, WL_LOG = 0x30, WL_FORCE = 0x40
};

enum wl_mode { WL_MODE_IDLE = 0, WL_MODE_VELOCITY = 1, WL_MODE_POSITION = 2, WL_MODE_TORQUE = 3 };

enum wl_flag {
    WL_FLAG_ENABLED = 0x01, WL_FLAG_WATCHDOG = 0x02, WL_FLAG_ESTOP = 0x04,
    WL_FLAG_CURRENT_LIMIT = 0x08, WL_FLAG_VEL_SATURATED = 0x10, WL_FLAG_FAULT = 0x20
};
#define WL_MODE_SHIFT 6

enum wl_nack_error {
    WL_ERR_BAD_LENGTH = 1, WL_ERR_BAD_VALUE = 2, WL_ERR_UNKNOWN_TYPE = 3, WL_ERR_ESTOP_LATCHED = 4,
    WL_ERR_BAD_MOTOR = 5, WL_ERR_BAD_VERSION = 6, WL_ERR_BUSY = 7
};

/* Frame decode results (negative = rejected). */
enum wl_decode_result {
    WL_OK = 0, WL_E_COBS = -1, WL_E_SHORT = -2, WL_E_CRC = -3, WL_E_VERSION = -4, WL_E_LENGTH = -5,
    WL_E_OVERFLOW = -6
};

/* ------------------------------------------------------------------ little-endian helpers */

static inline void wl_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void wl_put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void wl_put_f32(uint8_t *p, float f) { uint32_t u; memcpy(&u, &f, 4); wl_put_u32(p, u); }
static inline uint16_t wl_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t wl_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline float wl_get_f32(const uint8_t *p) { uint32_t u = wl_get_u32(p); float f; memcpy(&f, &u, 4); return f; }

/* ------------------------------------------------------------------ CRC-16/CCITT-FALSE */

static inline uint16_t wl_crc16_update(uint16_t crc, const uint8_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(d[i] << 8);
        for (int b = 0; b < 8; b++) crc = (uint16_t)((crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1));
    }
    return crc;
}
static inline uint16_t wl_crc16(const uint8_t *d, size_t n) { return wl_crc16_update(0xFFFF, d, n); }

/* ------------------------------------------------------------------ COBS */

/* Encode n bytes into out (capacity >= n + n/254 + 1); returns the encoded length (no delimiter). */
static inline size_t wl_cobs_encode(const uint8_t *in, size_t n, uint8_t *out) {
    size_t code_at = 0, o = 1;
    uint8_t code = 1;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == 0) {
            out[code_at] = code; code_at = o++; code = 1;
        } else {
            out[o++] = in[i];
            if (++code == 0xFF) {
                out[code_at] = code; code_at = o++; code = 1;
                if (i + 1 == n) { return o - 1; } /* run ended exactly on a full block: no final code */
            }
        }
    }
    out[code_at] = code;
    return o;
}

/* Decode n COBS bytes (no delimiter) into out (capacity cap); returns the length or WL_E_COBS. */
static inline int wl_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t code = in[i];
        if (code == 0 || i + code > n) return WL_E_COBS;
        for (size_t k = 1; k < code; k++) {
            if (in[i + k] == 0 || o >= cap) return WL_E_COBS;
            out[o++] = in[i + k];
        }
        i += code;
        if (code < 0xFF && i < n) {
            if (o >= cap) return WL_E_COBS;
            out[o++] = 0;
        }
    }
    return (int)o;
}

/* ------------------------------------------------------------------ frames */

typedef struct {
    uint8_t version, type;
    uint16_t seq, ack;
    uint32_t t_us;
    uint16_t len;
    const uint8_t *payload; /* points into the caller's raw buffer */
} wl_frame;

/* Build a complete wire frame (COBS + trailing 0x00) into out (capacity >= WL_MAX_ENCODED + 1).
 * Returns the number of bytes to transmit, or 0 if len > WL_MAX_PAYLOAD. */
static inline size_t wl_frame_encode(uint8_t type, uint16_t seq, uint16_t ack, uint32_t t_us,
                                     const uint8_t *payload, uint16_t len, uint8_t *out) {
    uint8_t raw[WL_MAX_FRAME];
    if (len > WL_MAX_PAYLOAD) return 0;
    raw[0] = WL_PROTOCOL_VERSION; raw[1] = type;
    wl_put_u16(raw + 2, seq); wl_put_u16(raw + 4, ack); wl_put_u32(raw + 6, t_us); wl_put_u16(raw + 10, len);
    if (len) memcpy(raw + WL_HEADER_SIZE, payload, len);
    uint16_t crc = wl_crc16(raw, WL_HEADER_SIZE + (size_t)len);
    raw[WL_HEADER_SIZE + len] = (uint8_t)(crc >> 8); /* CRC most significant byte first */
    raw[WL_HEADER_SIZE + len + 1] = (uint8_t)crc;
    size_t n = wl_cobs_encode(raw, WL_HEADER_SIZE + (size_t)len + WL_CRC_SIZE, out);
    out[n] = 0;
    return n + 1;
}

/* Parse an unencoded frame; f->payload points into raw. CRC is checked before anything else. */
static inline int wl_frame_parse(const uint8_t *raw, size_t n, wl_frame *f) {
    if (n < WL_HEADER_SIZE + WL_CRC_SIZE) return WL_E_SHORT;
    if (wl_crc16(raw, n - WL_CRC_SIZE) != (uint16_t)((raw[n - 2] << 8) | raw[n - 1])) return WL_E_CRC;
    f->version = raw[0]; f->type = raw[1];
    f->seq = wl_get_u16(raw + 2); f->ack = wl_get_u16(raw + 4); f->t_us = wl_get_u32(raw + 6);
    f->len = wl_get_u16(raw + 10);
    f->payload = raw + WL_HEADER_SIZE;
    if (f->version != WL_PROTOCOL_VERSION) return WL_E_VERSION;
    if ((size_t)WL_HEADER_SIZE + f->len + WL_CRC_SIZE != n) return WL_E_LENGTH;
    return WL_OK;
}

/* Decode one COBS frame without its delimiter into raw (capacity WL_MAX_FRAME). */
static inline int wl_frame_decode(const uint8_t *enc, size_t n, uint8_t *raw, wl_frame *f) {
    int m = wl_cobs_decode(enc, n, raw, WL_MAX_FRAME);
    if (m < 0) return m;
    return wl_frame_parse(raw, (size_t)m, f);
}

/* Streaming decoder: push received bytes one at a time (e.g. from the UART ISR's ring buffer). */
typedef struct {
    size_t n;
    int overflow;
    uint8_t buf[WL_MAX_ENCODED];
    uint8_t raw[WL_MAX_FRAME]; /* last, so an overrun would leave the object (sanitizers see it) */
} wl_decoder;

static inline void wl_decoder_init(wl_decoder *d) { d->n = 0; d->overflow = 0; }

/* Returns 1 when a valid frame is in *f (valid until the next push), 0 when more bytes are needed,
 * or a negative wl_decode_result when a chunk was rejected (decoding resumes at the next 0x00). */
static inline int wl_decoder_push(wl_decoder *d, uint8_t byte, wl_frame *f) {
    if (byte != 0) {
        if (d->overflow) return 0;
        if (d->n == sizeof d->buf) { d->overflow = 1; d->n = 0; return WL_E_OVERFLOW; }
        d->buf[d->n++] = byte;
        return 0;
    }
    size_t n = d->n;
    int over = d->overflow;
    d->n = 0; d->overflow = 0;
    if (over || n == 0) return 0;
    int r = wl_frame_decode(d->buf, n, d->raw, f);
    return r == WL_OK ? 1 : r;
}

/* ------------------------------------------------------------------ messages (payload packing)
 *
 * Every wl_pack_* writes the payload into p (room for the returned length; WL_MAX_PAYLOAD bytes
 * always suffice) and returns its length, or 0, writing nothing, if a count is out of range or the
 * message would not fit in WL_MAX_PAYLOAD (0 is never a valid length for these messages). Every wl_unpack_* checks the exact length first
 * and returns -1 on a mismatch without touching the output. Floats are IEEE-754 binary32.
 */

typedef struct { int32_t count; int16_t vel; int16_t current_ma; uint8_t flags; } wl_motor_state;
typedef struct { uint8_t mode; float setpoint; } wl_motor_command;
typedef struct {
    uint8_t motor; float kp, ki, kd, max_current, max_velocity; uint16_t watchdog_ms, stream_hz;
} wl_config;
typedef struct {
    uint8_t fw[3]; uint8_t n_motors, n_force; uint16_t heartbeat_hz; const uint32_t *cpr;
    uint8_t n_rates; const uint16_t *rates; uint8_t name_len; const char *name;
} wl_caps;

#define WL_STATE_MOTOR_SIZE 9
#define WL_COMMAND_MOTOR_SIZE 5
#define WL_CONFIG_SIZE 25

static inline size_t wl_pack_state(uint8_t *p, const wl_motor_state *m, int n) {
    if (n < 1 || n > WL_MAX_PAYLOAD / WL_STATE_MOTOR_SIZE) return 0;
    for (int i = 0; i < n; i++, p += WL_STATE_MOTOR_SIZE) {
        wl_put_u32(p, (uint32_t)m[i].count); wl_put_u16(p + 4, (uint16_t)m[i].vel);
        wl_put_u16(p + 6, (uint16_t)m[i].current_ma); p[8] = m[i].flags;
    }
    return (size_t)n * WL_STATE_MOTOR_SIZE;
}

static inline size_t wl_pack_command(uint8_t *p, const wl_motor_command *m, int n) {
    if (n < 1 || n > WL_MAX_PAYLOAD / WL_COMMAND_MOTOR_SIZE) return 0;
    for (int i = 0; i < n; i++, p += WL_COMMAND_MOTOR_SIZE) { p[0] = m[i].mode; wl_put_f32(p + 1, m[i].setpoint); }
    return (size_t)n * WL_COMMAND_MOTOR_SIZE;
}

/* Returns the motor count, or -1 if len is not a multiple of 5 or exceeds cap motors. The firmware
 * still checks the count against its motors (NACK bad_length) and each mode and setpoint (bad_value). */
static inline int wl_unpack_command(const uint8_t *p, size_t len, wl_motor_command *m, int cap) {
    if (cap < 0 || len % WL_COMMAND_MOTOR_SIZE || len / WL_COMMAND_MOTOR_SIZE > (size_t)cap) return -1;
    int n = (int)(len / WL_COMMAND_MOTOR_SIZE);
    for (int i = 0; i < n; i++, p += WL_COMMAND_MOTOR_SIZE) { m[i].mode = p[0]; m[i].setpoint = wl_get_f32(p + 1); }
    return n;
}

static inline size_t wl_pack_config(uint8_t *p, const wl_config *c) {
    p[0] = c->motor;
    wl_put_f32(p + 1, c->kp); wl_put_f32(p + 5, c->ki); wl_put_f32(p + 9, c->kd);
    wl_put_f32(p + 13, c->max_current); wl_put_f32(p + 17, c->max_velocity);
    wl_put_u16(p + 21, c->watchdog_ms); wl_put_u16(p + 23, c->stream_hz);
    return WL_CONFIG_SIZE;
}

static inline int wl_unpack_config(const uint8_t *p, size_t len, wl_config *c) {
    if (len != WL_CONFIG_SIZE) return -1;
    c->motor = p[0];
    c->kp = wl_get_f32(p + 1); c->ki = wl_get_f32(p + 5); c->kd = wl_get_f32(p + 9);
    c->max_current = wl_get_f32(p + 13); c->max_velocity = wl_get_f32(p + 17);
    c->watchdog_ms = wl_get_u16(p + 21); c->stream_hz = wl_get_u16(p + 23);
    return 0;
}

static inline size_t wl_pack_heartbeat(uint8_t *p, uint16_t status) { wl_put_u16(p, status); return 2; }
static inline int wl_unpack_heartbeat(const uint8_t *p, size_t len, uint16_t *status) {
    if (len != 2) return -1;
    *status = wl_get_u16(p); return 0;
}
static inline int wl_unpack_estop(const uint8_t *p, size_t len, uint8_t *reason) {
    if (len != 1) return -1;
    *reason = p[0]; return 0;
}
static inline size_t wl_pack_ack(uint8_t *p, uint16_t seq, uint8_t type) { wl_put_u16(p, seq); p[2] = type; return 3; }
static inline size_t wl_pack_nack(uint8_t *p, uint16_t seq, uint8_t type, uint8_t error) {
    wl_put_u16(p, seq); p[2] = type; p[3] = error; return 4;
}
static inline size_t wl_pack_estop(uint8_t *p, uint8_t reason) { p[0] = reason; return 1; }

/* Text longer than WL_MAX_PAYLOAD - 1 bytes is cut (possibly inside a UTF-8 sequence: keep logs ASCII). */
static inline size_t wl_pack_log(uint8_t *p, uint8_t level, const char *text, size_t n) {
    if (n > WL_MAX_PAYLOAD - 1) n = WL_MAX_PAYLOAD - 1;
    p[0] = level;
    if (n) memcpy(p + 1, text, n);
    return n + 1;
}

/* n = 6 (Fx Fy Fz Mx My Mz) or 8 (Kistler) channels. */
static inline size_t wl_pack_force(uint8_t *p, const float *ch, int n) {
    if (n != 6 && n != 8) return 0;
    for (int i = 0; i < n; i++) wl_put_f32(p + 4 * i, ch[i]);
    return (size_t)n * 4;
}

static inline size_t wl_pack_caps(uint8_t *p, const wl_caps *c) {
    size_t o = 0;
    if (7u + 4u * c->n_motors + 1u + 2u * c->n_rates + 1u + c->name_len > WL_MAX_PAYLOAD) return 0;
    if (c->n_force != 0 && c->n_force != 6 && c->n_force != 8) return 0;
    p[o++] = c->fw[0]; p[o++] = c->fw[1]; p[o++] = c->fw[2]; p[o++] = c->n_motors; p[o++] = c->n_force;
    wl_put_u16(p + o, c->heartbeat_hz); o += 2;
    for (int i = 0; i < c->n_motors; i++, o += 4) wl_put_u32(p + o, c->cpr[i]);
    p[o++] = c->n_rates;
    for (int i = 0; i < c->n_rates; i++, o += 2) wl_put_u16(p + o, c->rates[i]);
    p[o++] = c->name_len;
    if (c->name_len) memcpy(p + o, c->name, c->name_len);
    o += c->name_len;
    return o;
}

#endif /* WALKLAB_PROTO_H */

/* The one id of cordon: 128 bits for jobs, devices, servers, sessions,
 * tickets and package signing keys, all random but a job's (the time it was
 * made, then 80 random bits: cordon_id_ordered). On the wire and in the
 * database it travels as CORDON_ID_LEN raw bytes or as CORDON_ID_HEX_LEN
 * lowercase hex digits; a char buffer for the hex form with its NUL is
 * CORDON_ID_HEX_SIZE bytes. */
#ifndef CORDON_CORE_ID_H
#define CORDON_CORE_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CORDON_ID_LEN 16
#define CORDON_ID_HEX_LEN (2 * CORDON_ID_LEN)
#define CORDON_ID_HEX_SIZE (CORDON_ID_HEX_LEN + 1)

/* out = 32 lowercase hex digits and a NUL. */
void cordon_id_to_hex(const uint8_t id[CORDON_ID_LEN], char out[CORDON_ID_HEX_SIZE]);
/* 0 when s is exactly 32 hex digits (either case), -EINVAL otherwise;
 * out is written only on success. */
int cordon_id_from_hex(const char *s, uint8_t out[CORDON_ID_LEN]);
/* Is s exactly 32 lowercase hex digits? */
bool cordon_id_hex_valid(const char *s);
/* A fresh random id (libsodium's CSPRNG). */
void cordon_id_random(uint8_t out[CORDON_ID_LEN]);
/* An id whose first CORDON_ID_TIME_LEN bytes are ms (big-endian: the low
 * 48 bits of a Unix time in milliseconds) and whose other 10 bytes are
 * random (80 bits): ids made later sort after, so an index on them grows
 * at its end (a job's id) rather than at a random page. */
#define CORDON_ID_TIME_LEN 6
void cordon_id_ordered(uint8_t out[CORDON_ID_LEN], uint64_t ms);

#endif

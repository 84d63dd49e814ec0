/* C declarations for the copyrpc C ABI (linker/src/lib.rs). Freestanding-safe: only
 * <stdint.h> is needed. */
#ifndef COPYRPC_H
#define COPYRPC_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one message with payload_len payload bytes occupies in a ring (12-byte header +
 * payload, padded to 32). */
uint64_t copyrpc_padded_message_size(uint32_t payload_len);

/* Encodes a batch length (a multiple of 32 below 2^37) as the immediate value in host
 * order. Returns 1 on success, 0 (and leaves *out untouched) otherwise, also when out
 * is NULL. */
int32_t copyrpc_encode_imm(uint64_t delta, uint32_t *out);

/* Decodes an immediate value (host order) into the batch length in bytes. */
uint64_t copyrpc_decode_imm(uint32_t imm);

#ifdef __cplusplus
}
#endif
#endif

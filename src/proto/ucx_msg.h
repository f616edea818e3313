/*
 * ucx_msg.h — the two UCX active messages tide's UCX data path exchanges when a client's
 * endpoint connects to tided's UCX listener (src/server/ucx_srv.c, src/client/ucx.c,
 * docs/UCX.md). Everything else (RESERVE, COMMIT, PIN, RELEASE) stays on the tide://
 * connection; value bytes move by UCX RMA into and out of the registered pool.
 *
 *   UCX_AM_HELLO   client -> tided, sent with UCP_AM_SEND_FLAG_REPLY:
 *                  u32 magic, u16 token_len, token_len bytes (the tide:// token; 0 = none)
 *   UCX_AM_WELCOME tided -> client:
 *                  u32 magic, i32 status (0 or a negative tide code), then
 *                  status 0:  u64 pool base address, u64 pool bytes, u32 rkey_len, rkey,
 *                             36 bytes: tided's kernel boot id, u32 addr_len, addr_len
 *                             bytes: tided's UCP worker address
 *                  otherwise: u32 msg_len, msg_len bytes of a message for people
 *
 * The same-host endpoint (docs/UCX.md, "Design", 7): a tided whose UCX is UCX_SAME_HOST_MIN
 * or newer sends its worker address (addr_len 0 otherwise); a client with the same kernel
 * boot id and such a UCX makes a second endpoint from it, without peer-failure handling (the
 * only endpoints UCX puts on its shared-memory transports), unpacks the rkey on it and moves
 * values by RMA there: UCX does that by cma, the client reading and writing the pool itself.
 * No message of tide's goes on that endpoint.
 *
 * Bulk moves by active messages (the path where the transport's RMA is emulated, e.g. TCP;
 * the client chooses per endpoint, docs/UCX.md). The header is the whole control part; the
 * data is the value, which UCX sends eagerly when small and by its rendezvous protocol
 * (zero-copy out of / into the registered pool) when large:
 *
 *   UCX_AM_GET     client -> tided (REPLY flag), header u64 tag, u64 offset, u64 length,
 *                  no data: send pool[offset, offset+length) back
 *   UCX_AM_GETDATA tided -> client, header u64 tag, i32 status; data: those bytes (status 0)
 *   UCX_AM_PUT     client -> tided (REPLY flag), header u64 tag, u64 offset; data: the value,
 *                  written at pool + offset (an offset a RESERVE gave)
 *   UCX_AM_PUTDONE tided -> client, header u64 tag, i32 status: the bytes are in the pool
 *
 * Offsets are checked against the pool's bounds (an authenticated endpoint holds the rkey,
 * i.e. the same reach); the checksums at COMMIT and where a get lands do the rest.
 *
 * Integers are little-endian (both ends are the same machine type in practice; the
 * codec is frame.h's frame_rd/wr helpers).
 */
#ifndef TIDE_UCX_MSG_H
#define TIDE_UCX_MSG_H

#define UCX_AM_HELLO 0x7401u
#define UCX_AM_WELCOME 0x7402u
#define UCX_AM_GET 0x7403u
#define UCX_AM_GETDATA 0x7404u
#define UCX_AM_PUT 0x7405u
#define UCX_AM_PUTDONE 0x7406u
#define UCX_GET_HDR 24            /* u64 tag, u64 pool offset, u64 length */
#define UCX_PUT_HDR 16            /* u64 tag, u64 pool offset */
#define UCX_DONE_HDR 12           /* u64 tag, i32 status */
#define UCX_MSG_MAGIC 0x58435554u /* "TUCX" */
#define UCX_WELCOME_HEAD 8        /* magic + status */
#define UCX_RKEY_MAX (64 * 1024)  /* longest packed rkey accepted */
#define UCX_MSG_MAX 512           /* longest error message */
#define UCX_BOOT_ID 36            /* /proc/sys/kernel/random/boot_id, without its newline */
#define UCX_ADDR_MAX (64 * 1024)  /* longest worker address accepted */

#endif

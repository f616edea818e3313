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
 *                             u64 join ticket, 36 bytes: tided's kernel boot id,
 *                             u32 addr_len, addr_len bytes: tided's UCP worker address
 *                  otherwise: u32 msg_len, msg_len bytes of a message for people
 *
 * The same-host endpoint (docs/UCX.md, "Shared memory on one host"), with a UCX of
 * UCX_SAME_HOST_MIN or newer on both sides (tided sends addr_len 0 otherwise): a client whose
 * kernel boot id is tided's makes a second endpoint from the worker address, without
 * peer-failure handling (UCX puts shared memory only on such endpoints), and joins it:
 *
 *   UCX_AM_JOIN    client -> tided on the second endpoint (no REPLY flag):
 *                  u32 magic, u64 the join ticket its first endpoint's WELCOME carried,
 *                  u32 addr_len, addr_len bytes: the client's UCP worker address
 *   UCX_AM_JOINED  tided -> client, on an endpoint tided makes to that address: u32 magic,
 *                  i32 status 0. A join with a ticket tided did not give, or a second one
 *                  for the same first endpoint, is not answered.
 *
 * tided never answers on the endpoint UCX made on its side for the client's second one (its
 * `reply_ep`, which UCX may discard when the client dies), only on its own, which it closes
 * when the first endpoint closes or fails. Values go on the second endpoint one way only:
 * gets (UCX_AM_GET with the ticket appended to its header: UCX_GET_HDR_JOINED); tided
 * sends their bytes and the client reads them (cma), so a client that dies mid-transfer
 * leaves tided nothing to read from. Puts stay on the first endpoint.
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
#define UCX_AM_GET 0x7403u /* header UCX_GET_HDR, or UCX_GET_HDR_JOINED (same-host) */
#define UCX_AM_GETDATA 0x7404u
#define UCX_AM_PUT 0x7405u
#define UCX_AM_PUTDONE 0x7406u
#define UCX_AM_JOIN 0x7407u
#define UCX_AM_JOINED 0x7408u
#define UCX_GET_HDR 24            /* u64 tag, u64 pool offset, u64 length */
#define UCX_GET_HDR_JOINED 32     /* ... and u64 join ticket (on a same-host endpoint) */
#define UCX_PUT_HDR 16            /* u64 tag, u64 pool offset */
#define UCX_DONE_HDR 12           /* u64 tag, i32 status */
#define UCX_MSG_MAGIC 0x58435554u /* "TUCX" */
#define UCX_WELCOME_HEAD 8        /* magic + status */
#define UCX_RKEY_MAX (64 * 1024)  /* longest packed rkey accepted */
#define UCX_MSG_MAX 512           /* longest error message */
#define UCX_BOOT_ID 36            /* /proc/sys/kernel/random/boot_id, without its newline */
#define UCX_JOIN_HEAD 16          /* magic + ticket + addr_len */
#define UCX_ADDR_MAX (64 * 1024)  /* longest worker address accepted */

#endif

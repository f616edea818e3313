/*
 * ucx_msg.h — the active messages of tide's UCX data path (src/server/ucx_srv.c,
 * src/client/ucx.c, docs/UCX.md). RESERVE, COMMIT, PIN and RELEASE stay on the tide://
 * connection; these move the value bytes.
 *
 *   UCX_AM_HELLO   client -> tided, sent with UCP_AM_SEND_FLAG_REPLY:
 *                  u32 magic, u16 token_len, token_len bytes (the tide:// token; 0 = none)
 *   UCX_AM_WELCOME tided -> client:
 *                  u32 magic, i32 status (0 or a negative tide code), then
 *                  status 0:  u64 pool base address, u64 pool bytes, u32 rkey_len, rkey,
 *                             36 bytes: tided's kernel boot id, u32 addr_len, addr_len
 *                             bytes: the address of tided's same-host UCP worker; rkey is
 *                             the pool's, packed by that worker's context (both lengths 0
 *                             when tided has no same-host worker)
 *                  otherwise: u32 msg_len, msg_len bytes of a message for people
 *
 * Two UCP workers in tided. The one behind the UCX port (whose endpoints anyone who can
 * reach the port may open) serves active messages only: its context has no RMA, because
 * UCX emulates RMA with messages where a transport has none of its own (TCP), and that
 * emulation writes and reads whatever address the peer names, rkey or not. The same-host
 * worker (docs/UCX.md, "Design", 7) has RMA and only UCX's shared-memory transports, so
 * only processes of tided's user on tided's host reach it (cma needs the right to trace
 * tided; UCX's posix segments are 0600), and those could trace tided anyway: a client on
 * the same kernel boot id with a UCX of UCX_SAME_HOST_MIN or newer makes an endpoint from
 * its address (without peer-failure handling, the only endpoints UCX puts on shared
 * memory), unpacks the rkey on it and moves values by RMA there (UCX's cma: the client
 * reads and writes the pool itself). No message of tide's goes to that worker.
 *
 * Bulk by active messages (on the UCX port's endpoint). The header is the whole control
 * part; the data is the value, which UCX sends eagerly when small and by its rendezvous
 * protocol (zero-copy out of / into the pool; on RDMA NICs the NIC moves it) when large:
 *
 *   UCX_AM_GET     client -> tided (REPLY flag), header u64 tag, u64 offset, u64 length
 *                  (| UCX_GET_RNDV: answer by rendezvous only, for device memory, which
 *                  the client's CPU cannot copy an eager answer into), no data: send
 *                  pool[offset, offset+length) back
 *   UCX_AM_GETDATA tided -> client, header u64 tag, i32 status; data: those bytes (status 0)
 *   UCX_AM_PUT     client -> tided (REPLY flag), header u64 tag, u64 offset; data: the value,
 *                  written at pool + offset (an offset a RESERVE gave)
 *   UCX_AM_PUTDONE tided -> client, header u64 tag, i32 status: the bytes are in the pool
 *
 * Offsets are checked against the pool's bounds (an authenticated endpoint may move any of
 * the pool's bytes, as a unix:// client maps them all); the checksums at COMMIT and where a
 * get lands do the rest.
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
#define UCX_GET_RNDV (1ull << 63) /* in UCX_AM_GET's length: answer by rendezvous only */
#define UCX_PUT_HDR 16            /* u64 tag, u64 pool offset */
#define UCX_DONE_HDR 12           /* u64 tag, i32 status */
#define UCX_MSG_MAGIC 0x58435554u /* "TUCX" */
#define UCX_WELCOME_HEAD 8        /* magic + status */
#define UCX_RKEY_MAX (64 * 1024)  /* longest packed rkey accepted */
#define UCX_MSG_MAX 512           /* longest error message */
#define UCX_BOOT_ID 36            /* /proc/sys/kernel/random/boot_id, without its newline */
#define UCX_ADDR_MAX (64 * 1024)  /* longest worker address accepted */

#endif

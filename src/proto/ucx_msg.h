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
 *                  status 0:  u64 pool base address, u64 pool bytes, u32 rkey_len, rkey
 *                  otherwise: u32 msg_len, msg_len bytes of a message for people
 *
 * Integers are little-endian (both ends are the same machine type in practice; the
 * codec is frame.h's frame_rd/wr helpers).
 */
#ifndef TIDE_UCX_MSG_H
#define TIDE_UCX_MSG_H

#define UCX_AM_HELLO 0x7401u
#define UCX_AM_WELCOME 0x7402u
#define UCX_MSG_MAGIC 0x58435554u /* "TUCX" */
#define UCX_WELCOME_HEAD 8        /* magic + status */
#define UCX_RKEY_MAX (64 * 1024)  /* longest packed rkey accepted */
#define UCX_MSG_MAX 512           /* longest error message */

#endif

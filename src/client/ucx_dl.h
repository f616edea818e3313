/*
 * ucx_dl.h — UCX (libucp, libucs) loaded with dlopen on first use (ucx_dl.c), so that
 * libtide and tided link nothing of UCX: a program that never asks for UCX never loads it
 * (nor UCX's memory hooks, which do not mix with the sanitizers), and a host without UCX
 * runs everything else. Built only when UCX's headers were found (TIDE_HAVE_UCX, the
 * Makefile); the files that call UCX include this header after <ucp/api/ucp.h> and call
 * the usual names, which the macros below route through the loaded table.
 */
#ifndef TIDE_CLIENT_UCX_DL_H
#define TIDE_CLIENT_UCX_DL_H

#include <stddef.h>

/* 0 when UCX is loaded (or was already), else -1 with why in err (the library that could
 * not be opened or the symbol missing from it, or a build without UCX's headers). */
int ucx_dl_load(char *err, size_t errlen);

/* The loaded UCX's version as major * 1000 + minor (1.13: 1013), 0 when none is loaded. */
unsigned ucx_dl_version(void);

/* The oldest UCX whose same-host transports tide uses (docs/UCX.md, "Design", 7): before
 * 1.22, UCX's cma transport aborts the process (a fatal error, not a failed request) when
 * the peer it reads from or writes to dies mid-transfer, so a tided killed mid-get would
 * take the engine with it. Measured with Debian's 1.13 and PyPI's libucx-cu12 1.14.1 to
 * 1.21.0 (abort) and 1.22.0 (the request fails). */
#define UCX_SAME_HOST_MIN 1022u

/* This machine's kernel boot id (/proc/sys/kernel/random/boot_id, UCX_BOOT_ID characters)
 * into out: 0, or -1 when it cannot be read. A client and a tided with the same one run on
 * one kernel, where UCX's shared-memory transports may reach (docs/UCX.md). */
int ucx_boot_id(char *out);

/* UCX's TCP transport trusts every peer: a peer connected to one of its sockets may send
 * a put request that the receiving side writes at whatever address it names, unchecked
 * (UCX's uct/tcp/tcp_ep.c, uct_tcp_ep_handle_put_req), and UCX listens with it on every
 * network device UCX_NET_DEVICES allows, whatever address tided was bound to. So tide's
 * UCX contexts (tided's and libtide's) leave it out unless TIDE_UCX_TCP=1 is set, for
 * networks where every host that can connect is trusted (docs/UCX.md). With the
 * environment's UCX_TLS (unset: every transport): 0 when it stands as it is (TIDE_UCX_TCP=1,
 * or it names no tcp); 1 when out[cap] holds the list to use instead (tcp removed, or
 * "^tcp"-style excluded); -1 when it names tcp alone (nothing would be left). */
int ucx_tls_no_tcp(char *out, size_t cap);

/* The shared-memory transports (posix, sysv, cma, knem, xpmem) the environment's UCX_TLS
 * allows, comma-separated in out[cap]: 1, or 0 when it allows none. */
int ucx_tls_same_host(char *out, size_t cap);

#ifdef TIDE_HAVE_UCX
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

struct ucx_dl_fns {
    ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
    void (*config_release)(ucp_config_t *);
    ucs_status_t (*config_modify)(ucp_config_t *, const char *, const char *);
    ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                                 ucp_context_h *);
    void (*cleanup)(ucp_context_h);
    ucs_status_t (*context_query)(ucp_context_h, ucp_context_attr_t *);
    ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *);
    void (*worker_destroy)(ucp_worker_h);
    unsigned (*worker_progress)(ucp_worker_h);
    ucs_status_t (*worker_arm)(ucp_worker_h);
    ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
    ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **, size_t *);
    void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
    ucs_status_t (*worker_set_am_recv_handler)(ucp_worker_h, const ucp_am_handler_param_t *);
    ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
    ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h);
    ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
    void (*rkey_buffer_release)(void *);
    ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
    void (*rkey_destroy)(ucp_rkey_h);
    ucs_status_t (*listener_create)(ucp_worker_h, const ucp_listener_params_t *, ucp_listener_h *);
    void (*listener_destroy)(ucp_listener_h);
    ucs_status_t (*listener_query)(ucp_listener_h, ucp_listener_attr_t *);
    ucs_status_t (*listener_reject)(ucp_listener_h, ucp_conn_request_h);
    ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
    ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
    ucs_status_ptr_t (*ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t *);
    void (*ep_print_info)(ucp_ep_h, FILE *);
    ucs_status_ptr_t (*am_send_nbx)(ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,
                                    const ucp_request_param_t *);
    ucs_status_ptr_t (*am_recv_data_nbx)(ucp_worker_h, void *, void *, size_t,
                                         const ucp_request_param_t *);
    void (*am_data_release)(ucp_worker_h, void *);
    ucs_status_ptr_t (*get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h,
                                const ucp_request_param_t *);
    ucs_status_ptr_t (*put_nbx)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,
                                const ucp_request_param_t *);
    ucs_status_t (*request_check_status)(void *);
    void (*request_free)(void *);
    void (*request_cancel)(ucp_worker_h, void *);
    const char *(*status_string)(ucs_status_t);
    void (*get_version)(unsigned *, unsigned *, unsigned *);
    /* libucs's log handlers (the same in 1.12 to 1.22): tided routes UCX's lines into its
     * own log (server/ucx_log.c); libtide leaves the host program's UCX logging alone. */
    void (*log_push_handler)(ucs_log_func_t);
};
extern struct ucx_dl_fns ucx_dl;

#define ucp_config_read (ucx_dl.config_read)
#define ucp_config_release (ucx_dl.config_release)
#define ucp_config_modify (ucx_dl.config_modify)
#define ucp_init(p, c, ctx) (ucx_dl.init_version(UCP_API_MAJOR, UCP_API_MINOR, (p), (c), (ctx)))
#define ucp_cleanup (ucx_dl.cleanup)
#define ucp_context_query (ucx_dl.context_query)
#define ucp_worker_create (ucx_dl.worker_create)
#define ucp_worker_destroy (ucx_dl.worker_destroy)
#define ucp_worker_progress (ucx_dl.worker_progress)
#define ucp_worker_arm (ucx_dl.worker_arm)
#define ucp_worker_get_efd (ucx_dl.worker_get_efd)
#define ucp_worker_get_address (ucx_dl.worker_get_address)
#define ucp_worker_release_address (ucx_dl.worker_release_address)
#define ucp_worker_set_am_recv_handler (ucx_dl.worker_set_am_recv_handler)
#define ucp_mem_map (ucx_dl.mem_map)
#define ucp_mem_unmap (ucx_dl.mem_unmap)
#define ucp_rkey_pack (ucx_dl.rkey_pack)
#define ucp_rkey_buffer_release (ucx_dl.rkey_buffer_release)
#define ucp_ep_rkey_unpack (ucx_dl.ep_rkey_unpack)
#define ucp_rkey_destroy (ucx_dl.rkey_destroy)
#define ucp_listener_create (ucx_dl.listener_create)
#define ucp_listener_destroy (ucx_dl.listener_destroy)
#define ucp_listener_query (ucx_dl.listener_query)
#define ucp_listener_reject (ucx_dl.listener_reject)
#define ucp_ep_create (ucx_dl.ep_create)
#define ucp_ep_close_nbx (ucx_dl.ep_close_nbx)
#define ucp_ep_flush_nbx (ucx_dl.ep_flush_nbx)
#define ucp_ep_print_info (ucx_dl.ep_print_info)
#define ucp_am_send_nbx (ucx_dl.am_send_nbx)
#define ucp_am_recv_data_nbx (ucx_dl.am_recv_data_nbx)
#define ucp_am_data_release (ucx_dl.am_data_release)
#define ucp_get_nbx (ucx_dl.get_nbx)
#define ucp_put_nbx (ucx_dl.put_nbx)
#define ucp_request_check_status (ucx_dl.request_check_status)
#define ucp_request_free (ucx_dl.request_free)
#define ucp_request_cancel (ucx_dl.request_cancel)
#define ucs_status_string (ucx_dl.status_string)
#define ucs_log_push_handler (ucx_dl.log_push_handler)
#endif

#endif

/*
 * cmd_demo.c — `tide demo`: the reference engine reusing prompt prefixes through tide,
 * end to end, and proving the reuse exact.
 *
 * Two engine instances ("processes") share one store. Both run the same model (weights
 * generated from one seed). Their prompts are one long shared document followed by a
 * question: engine A asks its questions first and saves what it computes; engine B then asks
 * different questions about the same document. Each prompt goes through libtide's connector
 * the way vLLM drives it (src/engine/etide.c: lookup, allocate, load, compute the rest, save),
 * and is then computed again from scratch without the store. For every prompt the demo
 * prints the tokens the store supplied, the bytes moved, the time to first token with and
 * without tide, and whether the two sets of logits are equal bit for bit. Any difference,
 * or any engine or connector error, is a FAIL (exit 1); a store that cannot be reached only
 * costs the reuse (warnings, recomputed prompts) and still passes when the logits agree.
 *
 * Where the store lives:
 *   default        a tided this command starts (build/tide serve, found through
 *                  /proc/self/exe) on a free loopback port and a Unix socket in a fresh
 *                  directory, and stops by its pid at the end; A and B are two child
 *                  processes, one after the other, on unix:// (the same-host backend that
 *                  maps tided's pool: values are copied straight between it and the pages)
 *   --url mem://   the embedded store: A and B are two engine instances in this process
 *   --url other    A and B are child processes that each open the URL
 *
 * `tide demo --synthetic` is the older demo that moves synthetic blocks through the store
 * API alone (demo_synthetic.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/prng.h"
#include "engine/engine.h"
#include "engine/etide.h"
#include "tide.h"

typedef struct demo_opts {
    const char *url;
    engine_preset preset;
    const char *model_name;
    uint64_t tp, dcp, prefix_tokens, question_tokens, questions, seed, interval;
} demo_opts;

/* What one engine instance did, sent from a child to the parent through a pipe. */
typedef struct demo_summary {
    int ran;
    uint32_t prompts, mismatches, errors, warnings;
    uint64_t tokens, hit_tokens, resumed_tokens;
    uint64_t ttft_ns, recompute_ns, loaded_bytes, saved_bytes;
} demo_summary;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide demo [OPTIONS]\n"
            "\n"
            "Prefix reuse through tide, end to end, with the reference engine (a small hybrid\n"
            "attention + Mamba model with a paged KV cache). Engine A answers questions about a\n"
            "long shared document and saves its KV blocks and Mamba snapshots through tide's\n"
            "connector; engine B, another process, asks different questions about the same\n"
            "document and loads the shared prefix instead of computing it. Every prompt is\n"
            "also computed from scratch: the demo prints the time to first token (TTFT) with\n"
            "and without tide, the tokens and bytes the store supplied, and checks that the\n"
            "logits after a load are bit-identical to the recompute (PASS or FAIL).\n"
            "\n"
            "Options:\n"
            "  --url URL             the store both engines share (default: a tided started\n"
            "                        by this command, reached over unix://, stopped at the\n"
            "                        end); with mem:// both engines run in this process\n"
            "  --model M             hybrid (default: Mamba + attention layers) or attention\n"
            "  --tp N                simulated tensor-parallel ranks (default 1)\n"
            "  --dcp N               simulated decode-context-parallel ranks (default 1)\n"
            "  --prefix-tokens N     tokens of the shared document (default 4096)\n"
            "  --question-tokens N   tokens of each question (default 64)\n"
            "  --questions N         questions each engine asks (default 2)\n"
            "  --interval N          tokens between stored Mamba snapshots (default %d)\n"
            "  --seed N              weights and tokens (default 1)\n"
            "  --synthetic           the synthetic-block demo instead (tide demo --synthetic\n"
            "                        --help)\n"
            "\n"
            "Exit status: 0 PASS, 1 FAIL (logits that differ from the recompute, or an engine or\n"
            "connector error), 2 bad arguments.\n",
            ETIDE_DEFAULT_INTERVAL);
}

static int parse_args(int argc, char **argv, demo_opts *o) {
    static const struct {
        const char *name;
        size_t off;
        uint64_t min, max;
    } nums[] = {
        {"--tp", offsetof(demo_opts, tp), 1, ETIDE_MAX_RANKS},
        {"--dcp", offsetof(demo_opts, dcp), 1, ETIDE_MAX_RANKS},
        {"--prefix-tokens", offsetof(demo_opts, prefix_tokens), 1, 100000},
        {"--question-tokens", offsetof(demo_opts, question_tokens), 1, 10000},
        {"--questions", offsetof(demo_opts, questions), 1, 100},
        {"--interval", offsetof(demo_opts, interval), 1, 100000},
        {"--seed", offsetof(demo_opts, seed), 0, UINT64_MAX},
    };
    *o = (demo_opts){.url = NULL,
                     .preset = ENGINE_PRESET_HYBRID,
                     .model_name = "hybrid",
                     .tp = 1,
                     .dcp = 1,
                     .prefix_tokens = 4096,
                     .question_tokens = 64,
                     .questions = 2,
                     .seed = 1,
                     .interval = ETIDE_DEFAULT_INTERVAL};
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return 1;
        }
        if ((m = cli_opt_value(argc, argv, &i, "--url", &v))) {
            if (m < 0) return cli_usage_error("demo", "--url needs a value");
            o->url = v;
            continue;
        }
        if ((m = cli_opt_value(argc, argv, &i, "--model", &v))) {
            if (m < 0 || engine_preset_parse(v, &o->preset))
                return cli_usage_error("demo", "--model takes hybrid or attention");
            o->model_name = v;
            continue;
        }
        size_t k = 0;
        for (; k < sizeof(nums) / sizeof(nums[0]); k++) {
            if (!(m = cli_opt_value(argc, argv, &i, nums[k].name, &v))) continue;
            uint64_t *dst = (uint64_t *)((char *)o + nums[k].off);
            if (m < 0 || cli_parse_u64(v, nums[k].min, nums[k].max, dst))
                return cli_usage_error("demo", "%s takes an integer in %" PRIu64 "..%" PRIu64,
                                       nums[k].name, nums[k].min, nums[k].max);
            break;
        }
        if (k < sizeof(nums) / sizeof(nums[0])) continue;
        const char *names[sizeof(nums) / sizeof(nums[0]) + 3] = {"--url", "--model", "--synthetic"};
        for (k = 0; k < sizeof(nums) / sizeof(nums[0]); k++)
            names[3 + k] = nums[k].name;
        return cli_unknown_option_in("demo", argv[i], names, sizeof(names) / sizeof(names[0]));
    }
    if (o->tp * o->dcp > ETIDE_MAX_RANKS)
        return cli_usage_error("demo", "--tp x --dcp is at most %d ranks", ETIDE_MAX_RANKS);
    return 0;
}

/* Prompt of question q: the document (stream 0), then the question (stream q + 1). */
static void make_prompt(const demo_opts *o, uint32_t vocab, uint64_t q, uint32_t *out) {
    uint64_t base = prng_mix(o->seed);
    for (uint64_t i = 0; i < o->prefix_tokens; i++)
        out[i] = (uint32_t)(prng_mix(base + i) % vocab);
    uint64_t qb = prng_mix(base ^ prng_mix(q + 1));
    for (uint64_t i = 0; i < o->question_tokens; i++)
        out[o->prefix_tokens + i] = (uint32_t)(prng_mix(qb + i) % vocab);
}

static void model_config(const demo_opts *o, engine_config *cfg) {
    engine_config_init(cfg, o->preset);
    cfg->tp = (uint32_t)o->tp;
    cfg->dcp = (uint32_t)o->dcp;
    cfg->seed = o->seed;
    uint64_t need = o->prefix_tokens + o->question_tokens + 64;
    while ((uint64_t)cfg->num_blocks * cfg->block_size * cfg->dcp < need)
        cfg->num_blocks *= 2;
}

static double ms(uint64_t ns) {
    return (double)ns / 1e6;
}

/* "12.3 MiB" */
static const char *human(uint64_t bytes, char *buf, size_t len) {
    if (bytes < 10240)
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    else if (bytes < 10ull << 20)
        snprintf(buf, len, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(buf, len, "%.1f MiB", (double)bytes / (1 << 20));
    return buf;
}

/*
 * Engine instance `name` (A or B): a model, its connectors over store, and its questions
 * first_q .. first_q + questions - 1, each served through tide and recomputed. Prints a
 * line per prompt; fills *sum.
 */
static void run_engine(const demo_opts *o, char name, tide_store *store, uint64_t first_q,
                       demo_summary *sum) {
    memset(sum, 0, sizeof(*sum));
    engine_config cfg;
    model_config(o, &cfg);
    engine_model *m = NULL;
    etide *e = NULL;
    char err[512];
    uint32_t n = (uint32_t)(o->prefix_tokens + o->question_tokens);
    uint32_t *tok = malloc((size_t)n * sizeof(uint32_t));
    float *lt = NULL, *lr = NULL;
    int rc = engine_create(&cfg, &m, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tide demo: engine %c: %s\n", name, err);
        sum->errors++;
        goto out;
    }
    etide_options eo = {.interval = (uint32_t)o->interval};
    if ((rc = etide_create(m, store, &eo, &e, err, sizeof(err)))) {
        fprintf(stderr, "tide demo: engine %c: %s\n", name, err);
        sum->errors++;
        goto out;
    }
    lt = malloc(engine_vocab(m) * sizeof(float));
    lr = malloc(engine_vocab(m) * sizeof(float));
    if (!tok || !lt || !lr) {
        fprintf(stderr, "tide demo: out of memory\n");
        sum->errors++;
        goto out;
    }
    sum->ran = 1;
    printf("\nengine %c (pid %d): %" PRIu64 " questions on the document\n", name, (int)getpid(),
           o->questions);
    printf("  %-5s %7s %7s %11s %11s %11s %8s %11s  %s\n", "req", "tokens", "hit", "loaded",
           "TTFT tide", "recompute", "speedup", "saved", "logits vs recompute");
    fflush(stdout);
    for (uint64_t k = 0; k < o->questions; k++) {
        uint64_t q = first_q + k;
        char id[64], b1[32], b2[32];
        snprintf(id, sizeof(id), "%c-q%" PRIu64, name, q);
        make_prompt(o, engine_vocab(m), q, tok);
        etide_result res;
        uint64_t rns = 0;
        /* The recompute goes first: it faults in the pages both runs then use, so neither
         * pays for first touches the other does not. */
        if ((rc = etide_recompute(e, tok, n, lr, &rns))) {
            fprintf(stderr, "tide demo: engine %c: %s\n", name, etide_errmsg(e));
            sum->errors++;
            continue;
        }
        rc = etide_prefill(e, id, tok, n, lt, &res);
        if (rc) {
            fprintf(stderr, "tide demo: engine %c %s: %s (%s)\n", name, id, etide_errmsg(e),
                    tide_strerror(rc));
            sum->errors++;
            continue;
        }
        int same = memcmp(lt, lr, engine_vocab(m) * sizeof(float)) == 0;
        /* A miss computes the same tokens both ways: its ratio is only noise. */
        char x[16] = "miss";
        if (res.resumed_tokens && res.ttft_ns)
            snprintf(x, sizeof(x), "%.1fx", (double)rns / (double)res.ttft_ns);
        printf("  q%-4" PRIu64 " %7u %7u %11s %8.1f ms %8.1f ms %8s %11s  %s\n", q, n,
               res.resumed_tokens, human(res.loaded_bytes, b1, sizeof(b1)), ms(res.ttft_ns),
               ms(rns), x, human(res.saved_bytes, b2, sizeof(b2)),
               same ? "bit-identical" : "DIFFERENT");
        if (res.warning[0]) {
            fprintf(stderr, "tide demo: warning: engine %c %s: %s\n", name, id, res.warning);
            sum->warnings++;
        }
        fflush(stdout);
        sum->prompts++;
        sum->mismatches += !same;
        sum->tokens += n;
        sum->hit_tokens += res.hit_tokens;
        sum->resumed_tokens += res.resumed_tokens;
        sum->ttft_ns += res.ttft_ns;
        sum->recompute_ns += rns;
        sum->loaded_bytes += res.loaded_bytes;
        sum->saved_bytes += res.saved_bytes;
    }
out:
    etide_destroy(e);
    engine_destroy(m);
    free(tok);
    free(lt);
    free(lr);
}

/* Run engine `name` in a child process that opens url; its summary comes back through a
 * pipe. Returns 0, or -1 when the child could not run or report. */
static int run_child(const demo_opts *o, char name, const char *url, uint64_t first_q,
                     demo_summary *sum) {
    memset(sum, 0, sizeof(*sum));
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        tide_store *s = NULL;
        demo_summary mine = {0};
        char shown[CLI_URL_MAX];
        if (tide_open(url, &s)) {
            fprintf(stderr,
                    "tide demo: warning: engine %c: cannot open %s: %s; running without a "
                    "store\n",
                    name, cli_redact(url, shown, sizeof(shown)), tide_errmsg(NULL));
            s = NULL;
        }
        run_engine(o, name, s, first_q, &mine);
        tide_close(s);
        fflush(stdout);
        ssize_t w = write(fds[1], &mine, sizeof(mine));
        _exit(w == (ssize_t)sizeof(mine) ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = 0;
    while (got < (ssize_t)sizeof(*sum)) {
        ssize_t r = read(fds[0], (char *)sum + got, sizeof(*sum) - (size_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += r;
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (got != (ssize_t)sizeof(*sum) || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tide demo: engine %c (pid %d) died before reporting (status %d)\n", name,
                (int)pid, st);
        return -1;
    }
    return 0;
}

/* A tided of our own on a free loopback port and a Unix socket: this program is also
 * `tide serve`. */
typedef struct own_server {
    pid_t pid;
    char url[128];    /* unix://DIR/tide.sock: what the engines use */
    char tcp_url[64]; /* tide://127.0.0.1:PORT: the same tided over TCP */
    char dir[64];
} own_server;

static int server_start(own_server *srv) {
    char exe[4096], ready[128], log[128], sock[96];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        fprintf(stderr, "tide demo: cannot find this program (/proc/self/exe): %s\n",
                strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    snprintf(srv->dir, sizeof(srv->dir), "/tmp/tide-demo-XXXXXX");
    if (!mkdtemp(srv->dir)) {
        fprintf(stderr, "tide demo: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    snprintf(ready, sizeof(ready), "%s/ready", srv->dir);
    snprintf(log, sizeof(log), "%s/tided.log", srv->dir);
    snprintf(sock, sizeof(sock), "%s/tide.sock", srv->dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execl(exe, "tided", "--port", "0", "--metrics-port", "0", "--capacity", "1GiB",
              "--log-level", "warn", "--ready-file", ready, "--unix", sock, (char *)NULL);
        _exit(127);
    }
    srv->pid = pid;
    for (int i = 0; i < 1000; i++) { /* up to 10 s */
        FILE *f = fopen(ready, "r");
        int port = 0, mport = 0;
        if (f) {
            int ok = fscanf(f, "%d %d", &port, &mport) >= 1;
            fclose(f);
            if (ok && port > 0) {
                snprintf(srv->url, sizeof(srv->url), "unix://%s", sock);
                snprintf(srv->tcp_url, sizeof(srv->tcp_url), "tide://127.0.0.1:%d", port);
                return 0;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "tide demo: tided exited before listening (see %s)\n", log);
            srv->pid = 0;
            return -1;
        }
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    fprintf(stderr, "tide demo: tided did not start within 10 s (see %s)\n", log);
    return -1;
}

static void server_stop(own_server *srv) {
    if (srv->pid > 0) {
        kill(srv->pid, SIGTERM);
        int st;
        for (int i = 0; i < 500; i++) { /* up to 5 s, then force */
            if (waitpid(srv->pid, &st, WNOHANG) == srv->pid) {
                srv->pid = 0;
                break;
            }
            struct timespec d = {0, 10000000};
            nanosleep(&d, NULL);
        }
        if (srv->pid > 0) {
            kill(srv->pid, SIGKILL);
            waitpid(srv->pid, &st, 0);
            srv->pid = 0;
        }
    }
    if (srv->dir[0]) {
        char p[160];
        snprintf(p, sizeof(p), "%s/ready", srv->dir);
        unlink(p);
        snprintf(p, sizeof(p), "%s/tided.log", srv->dir);
        unlink(p);
        snprintf(p, sizeof(p), "%s/tide.sock", srv->dir);
        unlink(p);
        rmdir(srv->dir);
    }
}

static void print_summary(char name, const demo_summary *s) {
    if (!s->ran || !s->prompts) return;
    printf("engine %c: %u prompt%s, %" PRIu64 " of %" PRIu64 " prompt tokens from the store, "
           "TTFT %.1f ms with tide vs %.1f ms recomputed (%.1fx)\n",
           name, s->prompts, s->prompts == 1 ? "" : "s", s->resumed_tokens, s->tokens,
           ms(s->ttft_ns), ms(s->recompute_ns),
           s->ttft_ns ? (double)s->recompute_ns / (double)s->ttft_ns : 0.0);
}

int cmd_demo(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--synthetic") == 0) {
            memmove(argv + i, argv + i + 1, (size_t)(argc - i - 1) * sizeof(char *));
            argv[argc - 1] = NULL;
            return cmd_demo_synthetic(argc - 1, argv);
        }
    demo_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    /* Check the model before starting anything. */
    engine_config cfg;
    model_config(&o, &cfg);
    engine_model *probe;
    char err[512];
    if (engine_create(&cfg, &probe, err, sizeof(err))) {
        fprintf(stderr, "tide demo: %s\n", err);
        return 2;
    }
    const char *layout = engine_layout(probe);
    uint32_t n_attn = 0, n_mamba = 0;
    for (const char *p = layout; *p; p++)
        *p == 'A' ? n_attn++ : n_mamba++;
    uint32_t bt = engine_block_tokens(probe);

    own_server srv = {0};
    const char *url = o.url;
    int in_process = url && (strncmp(url, "mem://", 6) == 0 || !url[0]);
    if (!url) {
        if (server_start(&srv)) {
            server_stop(&srv);
            engine_destroy(probe);
            return 1;
        }
        url = srv.url;
    }
    printf("tide demo: model %s (%s: %u attention + %u Mamba layers, d_model %u, vocab %u), "
           "TP %" PRIu64 " x DCP %" PRIu64 "\n",
           o.model_name, layout, n_attn, n_mamba, cfg.d_model, cfg.vocab, o.tp, o.dcp);
    engine_destroy(probe);
    printf("  prompts: a %" PRIu64 "-token document + a %" PRIu64 "-token question; engine A "
           "asks q0..q%" PRIu64 ", then engine B asks q%" PRIu64 "..q%" PRIu64 "\n",
           o.prefix_tokens, o.question_tokens, o.questions - 1, o.questions, 2 * o.questions - 1);
    printf("  connector: TideStoreConnector, blocks of %u tokens, xxh3-128 prefix hashes", bt);
    if (n_mamba)
        printf(", Mamba snapshots every %" PRIu64 " tokens (align mode)",
               (o.interval + bt - 1) / bt * bt);
    printf("\n");
    char shown[CLI_URL_MAX];
    cli_redact(url, shown, sizeof(shown));
    if (srv.pid)
        printf("  store: %s, a tided started for this demo (pid %d; also %s); A and B are "
               "two processes sharing its pool (unix://: same-host zero-copy)\n",
               shown, (int)srv.pid, srv.tcp_url);
    else if (in_process)
        printf("  store: %s, embedded; A and B are two engine instances in this process\n", shown);
    else
        printf("  store: %s; A and B are two processes\n", shown);

    demo_summary a = {0}, b = {0};
    int broken = 0;
    if (in_process) {
        tide_store *s = NULL;
        if (tide_open(url, &s)) {
            fprintf(stderr, "tide demo: cannot open %s: %s\n", shown, tide_errmsg(NULL));
            return 1;
        }
        run_engine(&o, 'A', s, 0, &a);
        run_engine(&o, 'B', s, o.questions, &b);
        tide_close(s);
    } else {
        broken |= run_child(&o, 'A', url, 0, &a) != 0;
        broken |= run_child(&o, 'B', url, o.questions, &b) != 0;
    }
    server_stop(&srv);

    printf("\n");
    print_summary('A', &a);
    print_summary('B', &b);
    uint32_t prompts = a.prompts + b.prompts, bad = a.mismatches + b.mismatches;
    uint32_t errors = a.errors + b.errors + (uint32_t)broken;
    printf("logits after tide equal a full recompute bit for bit: %u of %u prompts\n",
           prompts - bad, prompts);
    if (a.warnings + b.warnings)
        printf("store warnings: %u (see above); the prompts they touched were recomputed\n",
               a.warnings + b.warnings);
    int ok = !bad && !errors && prompts == 2 * o.questions;
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

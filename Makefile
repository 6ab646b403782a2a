# ferry - GNU make build.  `make` builds build/libferry.{a,so} and
# build/ferry_bench; `make test` runs the whole suite (plain, then
# ASan+UBSan, then TSan on the concurrent tests); `make install PREFIX=...`.
#
# SAN=address|thread builds into build-asan/ or build-tsan/.

PREFIX   ?= /usr/local
CC       ?= cc
SAN      ?=
PKGS     := libibverbs numa liburcu-qsbr liburcu-cds ck
TEST_PKGS := cmocka
DEBS     := libibverbs-dev libnuma-dev liburcu-dev libck-dev libcmocka-dev pkg-config

ifeq ($(SAN),)
B := build
SANFLAGS :=
else ifeq ($(SAN),address)
B := build-asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SAN),thread)
B := build-tsan
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
else
$(error SAN must be empty, address or thread)
endif

# Dependencies: install them (root) or say what to run, before anything else.
DEPS_OK := $(shell pkg-config --exists $(PKGS) $(TEST_PKGS) 2>/dev/null && echo yes)
ifneq ($(DEPS_OK),yes)
ifeq ($(MAKECMDGOALS),clean)
else
$(info ferry: missing build dependencies; need Debian packages: $(DEBS))
ifeq ($(shell id -u),0)
$(info ferry: installing them with apt-get (root))
DEPS_INSTALL := $(shell (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEBS)) >&2 && echo ok)
ifneq ($(DEPS_INSTALL),ok)
$(error apt-get failed; run: apt-get update && apt-get install -y $(DEBS))
endif
else
$(error run as root: apt-get update && apt-get install -y $(DEBS))
endif
endif
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))
CMOCKA_LIBS := $(shell pkg-config --libs cmocka)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS  ?= -O2 -g
# -fvisibility=hidden: only what runtime/ferry.h marks FERRY_API is exported.
# URCU_INLINE_SMALL_FUNCTIONS: rcu_dereference is an inline consume load.
ALL_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) $(SANFLAGS) -fPIC -fvisibility=hidden -D_GNU_SOURCE \
              -DURCU_INLINE_SMALL_FUNCTIONS -pthread -I. $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -pthread
ALL_LDFLAGS := $(SANFLAGS) $(LDFLAGS)

LIB_DIRS := ring slice qp ep runtime
LIB_SRCS := $(sort $(shell find $(LIB_DIRS) -name '*.c'))
LIB_OBJS := $(LIB_SRCS:%.c=$(B)/obj/%.o)
BENCH_SRCS := $(wildcard bench/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
TESTS := $(TEST_SRCS:tests/%.c=$(B)/tests/%)
# The concurrent tests: these also run under ThreadSanitizer.
TSAN_TESTS := test_ring test_integration test_faults test_loop test_ctl test_stats test_api \
              test_histo test_perf test_epcache

.PHONY: all test test-plain test-asan test-tsan test-verbs run-tests install check-install clean bench fuzz callgrind
all: $(B)/libferry.a $(B)/libferry.so $(B)/ferry_bench $(B)/ferry.pc

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(B)/libferry.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(B)/libferry.so: $(LIB_OBJS)
	$(CC) -shared -Wl,-z,defs $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/ferry_bench: $(BENCH_SRCS:%.c=$(B)/obj/%.o) $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS) -lm

$(B)/tests/%: $(B)/obj/tests/%.o $(B)/libferry.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LDLIBS) -lm

# Standalone check of the verbs provider alone (needs RDMA devices).
$(B)/verbs_smoke: $(B)/obj/tests/verbs_smoke.o $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Target and streaming initiator of the fault tests on RDMA (tests/fault-vm.sh).
$(B)/fault_peer: $(B)/obj/tests/fault_peer.o $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# The full soak under injected faults: 10^6 requests (make test runs a
# shorter one; SOAK_REQUESTS=n for another size).
.PHONY: soak
soak: $(B)/tests/test_soak
	FERRY_SOAK_REQUESTS=$(or $(SOAK_REQUESTS),1000000) $(B)/tests/test_soak

$(B)/ferry.pc:
	@mkdir -p $(B)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: ferry' 'Description: RDMA transfer engine for LLM KV-cache buffers' \
	  'Version: $(shell sed -n 's/^#define FERRY_VERSION_MAJOR //p' runtime/ferry.h).$(shell sed -n 's/^#define FERRY_VERSION_MINOR //p' runtime/ferry.h).0' \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lferry' \
	  'Requires.private: $(PKGS)' 'Libs.private: -pthread' > $@

# Run every test binary; each prints cmocka's summary.  FERRY_TEST_FILTER
# limits the set (space-separated names).
run-tests: $(TESTS)
	@fail=0; for t in $(or $(RUN),$(TESTS)); do \
	  echo "== $$t"; \
	  $$t || { echo "FAILED: $$t"; fail=1; }; \
	done; exit $$fail

test-plain:
	$(MAKE) run-tests
test-asan:
	$(MAKE) SAN=address run-tests
test-tsan:
	$(MAKE) SAN=thread run-tests RUN="$(TSAN_TESTS:%=build-tsan/tests/%)" \
	  TESTS="$(TSAN_TESTS:%=build-tsan/tests/%)"

# Install into a scratch prefix without the shared library and link a
# program with only what pkg-config says: the static link line is complete.
check-install:
	rm -rf $(B)/inst
	$(MAKE) install PREFIX=$(CURDIR)/$(B)/inst
	rm -f $(B)/inst/lib/libferry.so
	PKG_CONFIG_PATH=$(CURDIR)/$(B)/inst/lib/pkgconfig sh -c \
	  '$(CC) -std=gnu11 -Wall -Werror tests/install_app.c -o $(B)/install_app \
	   $$(pkg-config --cflags --libs --static ferry)'
	$(B)/install_app

# The verbs tests need RDMA devices: this host's if it has any, else the
# Soft-RoCE VM (one boot for the whole verbs suite).  Only outside CI may
# they be skipped, and then loudly.
SOFTROCE ?= ../shared/softroce
VERBS_TESTS := $(B)/tests/test_integration $(B)/tests/test_twoproc $(B)/tests/test_api \
               $(B)/verbs_smoke $(B)/fault_peer
test-verbs: $(VERBS_TESTS)
	@if ls /sys/class/infiniband/* >/dev/null 2>&1; then \
	  B=$(B) tests/verbs-suite.sh; \
	elif [ -x $(SOFTROCE)/vm-run ]; then \
	  $(SOFTROCE)/setup >/dev/null && \
	  $(SOFTROCE)/vm-run --devices 4 --timeout 900 -- env B=$(B) tests/verbs-suite.sh; \
	else \
	  echo "ferry: no RDMA device and no $(SOFTROCE)/vm-run: verbs tests NOT run"; \
	  test -z "$$CI"; \
	fi

# The whole suite: plain, ASan+UBSan, TSan on the concurrent tests, verbs,
# then the wire-format fuzzer for a bounded time.
test:
	$(MAKE) check-install
	$(MAKE) test-plain
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-verbs
	$(MAKE) fuzz FUZZ_SECONDS=$(or $(CI_FUZZ_SECONDS),30)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 runtime/ferry.h $(DESTDIR)$(PREFIX)/include/ferry.h
	install -m 644 $(B)/libferry.a $(DESTDIR)$(PREFIX)/lib/libferry.a
	install -m 755 $(B)/libferry.so $(DESTDIR)$(PREFIX)/lib/libferry.so
	install -m 755 $(B)/ferry_bench $(DESTDIR)$(PREFIX)/bin/ferry_bench
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(B)/ferry.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ferry.pc

bench: $(B)/ferry_bench
	$(B)/ferry_bench $(BENCH_ARGS)

# Instructions per slice of the data plane (valgrind; stable on a noisy host).
callgrind: $(B)/ferry_bench
	bench/callgrind.sh $(B)/ferry_bench $(or $(CALLGRIND_ITERS),200)

# libFuzzer on the wire decoders: `make fuzz [FUZZ_SECONDS=30]`.  Needs clang
# and its libFuzzer runtime (Debian 12: package clang, whose
# libclang-common-14-dev pulls libclang-rt-14-dev); installed with apt-get
# when run as root.  The target writes its own seeds; build-fuzz/corpus
# keeps what the fuzzer found between runs, crashes land in build-fuzz/.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_DEBS := clang libclang-rt-dev
FUZZ_CFLAGS := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g -O1 \
               -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -DURCU_INLINE_SMALL_FUNCTIONS -I.
FUZZ_PROBE := int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) \
              { (void)d; (void)n; return 0; }

fuzz: build-fuzz/fuzz_wire
	@mkdir -p build-fuzz/corpus
	FERRY_FUZZ_SEEDS=build-fuzz/corpus build-fuzz/fuzz_wire
	build-fuzz/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -close_fd_mask=2 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus

build-fuzz/fuzz_wire: tests/fuzz_wire.c runtime/ctl/wire.c runtime/ctl/wire.h qp/nic.h ring/base/log.c
	@mkdir -p build-fuzz
	@if ! echo '$(FUZZ_PROBE)' | $(FUZZ_CC) -x c -fsanitize=fuzzer - \
	    -o build-fuzz/probe >/dev/null 2>&1; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "ferry: $(FUZZ_CC) cannot build libFuzzer targets;" \
	      "run as root: apt-get update && apt-get install -y $(FUZZ_DEBS)"; exit 1; \
	  fi; \
	  echo "ferry: $(FUZZ_CC) cannot build libFuzzer targets; installing $(FUZZ_DEBS) (root)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $(FUZZ_DEBS)) || exit 1; \
	fi
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz_wire.c runtime/ctl/wire.c ring/base/log.c -o $@

clean:
	rm -rf build build-asan build-tsan build-fuzz

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

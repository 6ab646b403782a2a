# ferry - GNU make build.  `make` builds build/libferry.{a,so} and
# build/ferry_bench; `make bench` installs what is missing and runs the main
# job (two processes: the best transport, and tcp); `make test` installs
# what is missing and runs the whole suite (layering and export checks,
# install check, plain, ASan+UBSan, TSan on the concurrent tests, the verbs
# suite on real RDMA, fuzzing);
# `make install PREFIX=...`.
#
# SAN=address|thread builds into build-asan/ or build-tsan/.
#
# Dependencies are installed by .ci/install-deps, which `make bench` and
# `make test` run as a recipe line: never while make parses, never for
# `make -n`, `make install` or `make clean`.

PREFIX   ?= /usr/local
CC       ?= cc
SAN      ?=
PC_PKGS  := libibverbs numa liburcu-qsbr liburcu-cds ck libsodium
# The metadata store's libraries go into ferry.pc as plain -l flags
# (Libs.private), not Requires.private: `pkg-config --static` would pull
# libcurl's static link line, a dozen libraries whose -dev packages nothing
# else needs, when linking libcurl shared is what an application does.
STORE_PKGS := hiredis libcurl libcjson
PKGS     := $(PC_PKGS) $(STORE_PKGS)
TEST_PKGS := cmocka

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

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)
STORE_LIBS := $(shell pkg-config --libs $(STORE_PKGS) 2>/dev/null)

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
# tests/ by kind: unit/<module>, integration, stress (cmocka programs named
# test_*.c), fuzz, tools (helper programs and scripts), harness (the one
# header that reaches into the internals).
TEST_SRCS := $(sort $(shell find tests/unit tests/integration tests/stress -name 'test_*.c'))
TESTS := $(TEST_SRCS:%.c=$(B)/%)
# The concurrent tests: these also run under ThreadSanitizer.
TSAN_TESTS := tests/unit/ring/test_ring tests/unit/ring/test_log tests/integration/test_integration \
              tests/integration/test_faults tests/unit/qp/test_loop tests/unit/qp/test_tcp \
              tests/unit/qp/test_cma tests/unit/ctl/test_ctl \
              tests/integration/test_stats tests/integration/test_api tests/unit/metrics/test_histo \
              tests/unit/metrics/test_perf tests/integration/test_epcache tests/integration/test_many_segments \
              tests/integration/test_calls tests/integration/test_cluster \
              tests/integration/test_named tests/integration/test_notify \
              tests/integration/test_mixed tests/integration/test_peer_faults \
              tests/integration/test_caller tests/integration/test_teardown \
              tests/integration/test_slow_peers tests/integration/test_fork

.PHONY: all test test-all test-plain test-transports test-caller test-asan test-tsan test-verbs run-tests install check-install \
        clean bench bench-run bench-tools fuzz callgrind deps deps-check check-layers check-exports
all: $(B)/libferry.a $(B)/libferry.so $(B)/ferry_bench $(B)/ferry.pc

# Say what is missing (installing is .ci/install-deps' job, run by bench/test).
deps-check:
	@pkg-config --exists $(PKGS) 2>/dev/null || { \
	  echo "ferry: missing build dependencies: run .ci/install-deps build" \
	       "(as root it installs them; otherwise it prints the apt-get line)"; exit 1; }

deps:
	.ci/install-deps build test

$(B)/obj/%.o: %.c | deps-check
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

# bench/compare-tcp.sh's baselines: an 8-byte TCP ping-pong, one thread's
# memcpy over cold pools and a plain process_vm_writev/readv loop between
# two processes (bench/tools/; not linked to ferry; tool.c, what they
# share, linked into each).
BENCH_TOOLS := $(B)/tcp_pingpong $(B)/memcpy_bw $(B)/pvm_bw
bench-tools: $(BENCH_TOOLS)
$(BENCH_TOOLS): $(B)/%: bench/tools/%.c bench/tools/tool.c bench/tools/tool.h
	@mkdir -p $(B)
	$(CC) -std=gnu11 $(WARN) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE $(ALL_LDFLAGS) -o $@ \
	  $(filter %.c,$^)

# Standalone check of the verbs provider alone (needs RDMA devices).
$(B)/verbs_smoke: $(B)/obj/tests/tools/verbs_smoke.o $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# qp/post's depth accounting over real devices (tests/tools/verbs_depth.c).
$(B)/verbs_depth: $(B)/obj/tests/tools/verbs_depth.o $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Target and streaming initiator of the fault tests on RDMA (tests/tools/fault-vm.sh).
$(B)/fault_peer: $(B)/obj/tests/tools/fault_peer.o $(B)/libferry.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# The full soak under injected faults: 10^6 requests (make test runs a
# shorter one; SOAK_REQUESTS=n for another size).
.PHONY: soak
soak: $(B)/tests/stress/test_soak
	FERRY_SOAK_REQUESTS=$(or $(SOAK_REQUESTS),1000000) $(B)/tests/stress/test_soak

$(B)/ferry.pc: Makefile runtime/ferry.h
	@mkdir -p $(B)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: ferry' 'Description: RDMA transfer engine for LLM KV-cache buffers' \
	  'Version: $(shell sed -n 's/^#define FERRY_VERSION_MAJOR //p' runtime/ferry.h).$(shell sed -n 's/^#define FERRY_VERSION_MINOR //p' runtime/ferry.h).0' \
	  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lferry' \
	  'Requires.private: $(PC_PKGS)' 'Libs.private: $(STORE_LIBS) -pthread' > $@

# Run every test binary; each prints cmocka's summary.  RUN= limits the set
# (space-separated binaries).
run-tests: $(TESTS)
	@fail=0; for t in $(or $(RUN),$(TESTS)); do \
	  echo "== $$t"; \
	  $$t || { echo "FAILED: $$t"; fail=1; }; \
	done; exit $$fail

test-plain:
	$(MAKE) run-tests
	$(MAKE) test-transports
	$(MAKE) test-caller

# The engine suites again over tcp and over cma (one process: both engines
# force the transport through FERRY_TEST_*_NICS; test_twoproc: a forked
# target).  test_xproc (two processes, both transports) runs in run-tests.
TRANSPORT_SUITES := tests/integration/test_integration tests/integration/test_api \
                    tests/integration/test_twoproc
test-transports: $(TRANSPORT_SUITES:%=$(B)/%)
	@fail=0; for n in tcp cma; do for t in $(TRANSPORT_SUITES:%=$(B)/%); do \
	  echo "== $$t over $$n"; \
	  FERRY_TEST_INIT_NICS=$$n FERRY_TEST_TARGET_NICS=$$n $$t || { echo "FAILED: $$t over $$n"; fail=1; }; \
	done; done; exit $$fail
# The engine suites again with idle policy caller (the application's
# threads run the passes, the cores' threads fall back): with the suites'
# own NICs (loop; test_twoproc: its own), then over tcp and over cma.
CALLER_SUITES := tests/integration/test_integration tests/integration/test_api \
                 tests/integration/test_calls tests/integration/test_notify \
                 tests/integration/test_faults tests/integration/test_twoproc
test-caller: $(CALLER_SUITES:%=$(B)/%)
	@fail=0; for n in loop tcp cma; do for t in $(CALLER_SUITES:%=$(B)/%); do \
	  case "$$n:$$t" in tcp:*test_faults|cma:*test_faults) continue;; esac; \
	  echo "== $$t, idle caller, over $$n"; \
	  nics="FERRY_TEST_INIT_NICS=$$n FERRY_TEST_TARGET_NICS=$$n"; [ $$n = loop ] && nics=; \
	  env FERRY_TEST_IDLE=caller $$nics $$t || \
	    { echo "FAILED: $$t (idle caller, $$n)"; fail=1; }; \
	done; done; exit $$fail
test-asan:
	$(MAKE) SAN=address run-tests
test-tsan:
	$(MAKE) SAN=thread run-tests RUN="$(TSAN_TESTS:%=build-tsan/%)" \
	  TESTS="$(TSAN_TESTS:%=build-tsan/%)"
	@echo "== idle caller: the hand-over of the cores between threads, under TSan"
	FERRY_TEST_IDLE=caller $(MAKE) SAN=thread run-tests \
	  RUN="build-tsan/tests/integration/test_integration build-tsan/tests/integration/test_calls" \
	  TESTS="$(TSAN_TESTS:%=build-tsan/%)"

# Dependencies point one way (ring <- slice <- qp <- ep <- runtime), no
# library file over ~800 lines, every acquire/release names its pair.
check-layers:
	tests/tools/check-layers.sh

# The shared library exports ferry_* and nothing else.
check-exports: $(B)/libferry.so
	@extra=$$(nm -D --defined-only $(B)/libferry.so | awk '$$3 !~ /^ferry_/ {print $$3}'); \
	if [ -n "$$extra" ]; then echo "check-exports: exported beyond ferry_*: $$extra"; exit 1; fi; \
	echo "check-exports: ok ($$(nm -D --defined-only $(B)/libferry.so | wc -l) symbols, all ferry_*)"

# Install into a scratch prefix without the shared library and link a
# program with only what pkg-config says: the static link line is complete.
check-install:
	rm -rf $(B)/inst
	$(MAKE) install PREFIX=$(CURDIR)/$(B)/inst
	rm -f $(B)/inst/lib/libferry.so
	PKG_CONFIG_PATH=$(CURDIR)/$(B)/inst/lib/pkgconfig sh -c \
	  '$(CC) -std=gnu11 -Wall -Werror tests/tools/install_app.c -o $(B)/install_app \
	   $$(pkg-config --cflags --libs --static ferry)'
	$(B)/install_app

# The verbs tests need RDMA devices: this host's if it has any, else the
# Soft-RoCE VM (one boot for the whole verbs suite).  Only outside CI may
# they be skipped, and then loudly.
SOFTROCE ?= ../shared/softroce
VERBS_TESTS := $(B)/tests/integration/test_integration $(B)/tests/integration/test_twoproc \
               $(B)/tests/integration/test_api $(B)/verbs_smoke $(B)/verbs_depth $(B)/fault_peer
test-verbs: $(VERBS_TESTS)
	@if ls /sys/class/infiniband/* >/dev/null 2>&1; then \
	  B=$(B) tests/tools/verbs-suite.sh; \
	elif [ -x $(SOFTROCE)/vm-run ]; then \
	  $(SOFTROCE)/setup >/dev/null && \
	  B=$(B) SOFTROCE=$(SOFTROCE) tests/tools/verbs-vm.sh; \
	else \
	  echo "ferry: no RDMA device and no $(SOFTROCE)/vm-run: verbs tests NOT run"; \
	  test -z "$$CI"; \
	fi

# The whole suite: checks, plain, ASan+UBSan, TSan on the concurrent tests,
# verbs, then the fuzzers for a bounded time.  The first line
# installs what is missing (not run by make -n: it does not name $(MAKE)).
# The three builds (plain, ASan, TSan: ~5 CPU minutes) use every CPU
# unless the caller chose a -j; the tests themselves still run one at a
# time (their timeouts assume a CPU each).
test:
	.ci/install-deps build test
	$(MAKE) $(if $(filter -j%,$(MAKEFLAGS)),,-j$$(nproc)) test-all

test-all:
	$(MAKE) check-layers
	$(MAKE) check-exports
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

# The main job: two ferry_bench processes on loopback, over the best
# transport between them (cma on one host when the kernel allows it) and
# over tcp (and verbs when this host has an RDMA device), GB/s for each
# (bench/main-job.sh; BENCH_ARGS go to the initiators).
bench:
	.ci/install-deps build
	$(MAKE) bench-run

bench-run: $(B)/ferry_bench
	B=$(B) bench/main-job.sh $(BENCH_ARGS)

# Instructions per slice of the data plane (valgrind; stable on a noisy host).
callgrind: $(B)/ferry_bench
	bench/callgrind.sh $(B)/ferry_bench $(or $(CALLGRIND_ITERS),200)

# libFuzzer on what ferry reads from the network: the wire decoders, cma
# and verbs addresses and a cma peer's rkey table (fuzz_wire), the tcp provider's frames and addresses (fuzz_tcp: its codec,
# a live target and a live initiator fed over loopback), what a metadata store returns
# (fuzz_meta: the published record, base64, etcd's JSON replies, and the Redis and etcd
# backends against a store thread on loopback) and the control plane's streams
# (fuzz_ctl: a client reading replies and a handshake, a live server fed requests over
# loopback).  `make fuzz [FUZZ_SECONDS=30]` is the total, a quarter each (at least 1 s).  Needs
# clang and its libFuzzer runtime (Debian 12: clang, libclang-rt-dev),
# which `make test` installs (.ci/install-deps test).  The targets write
# their own seeds; build-fuzz/corpus* keep what the fuzzers found between
# runs, crashes land in build-fuzz/.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_PART_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 4 )); [ $$s -ge 1 ] || s=1; echo $$s)
FUZZ_CFLAGS := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g -O1 \
               -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -DURCU_INLINE_SMALL_FUNCTIONS -I.
FUZZ_META_SRCS := tests/fuzz/fuzz_meta.c $(addprefix runtime/ctl/meta/,base64.c etcd.c etcd_json.c \
                  meta.c record.c redis.c) runtime/ctl/sock.c runtime/engine/opts.c ring/base/log.c ring/base/fd.c

fuzz: build-fuzz/fuzz_wire build-fuzz/fuzz_tcp build-fuzz/fuzz_meta build-fuzz/fuzz_ctl
	@mkdir -p build-fuzz/corpus build-fuzz/corpus-tcp build-fuzz/corpus-meta build-fuzz/corpus-ctl
	FERRY_FUZZ_SEEDS=build-fuzz/corpus build-fuzz/fuzz_wire
	build-fuzz/fuzz_wire -max_total_time=$(FUZZ_PART_SECONDS) -close_fd_mask=2 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus
	FERRY_FUZZ_SEEDS=build-fuzz/corpus-tcp build-fuzz/fuzz_tcp
	build-fuzz/fuzz_tcp -max_total_time=$(FUZZ_PART_SECONDS) -close_fd_mask=2 \
	  -artifact_prefix=build-fuzz/tcp- build-fuzz/corpus-tcp
	FERRY_FUZZ_SEEDS=build-fuzz/corpus-meta build-fuzz/fuzz_meta
	build-fuzz/fuzz_meta -max_total_time=$(FUZZ_PART_SECONDS) -close_fd_mask=2 \
	  -artifact_prefix=build-fuzz/meta- build-fuzz/corpus-meta
	FERRY_FUZZ_SEEDS=build-fuzz/corpus-ctl build-fuzz/fuzz_ctl
	build-fuzz/fuzz_ctl -max_total_time=$(FUZZ_PART_SECONDS) -close_fd_mask=2 \
	  -artifact_prefix=build-fuzz/ctl- build-fuzz/corpus-ctl

# The verbs provider's files for fv_addr_unpack (they link as a whole; no
# device is opened).  clang takes gid.c's wrapped message strings for a
# missing comma (-Wstring-concatenation): gcc, which builds the library, does not.
WIRE_FUZZ_VERBS := $(sort $(wildcard qp/verbs/*.c))
build-fuzz/fuzz_wire: tests/fuzz/fuzz_wire.c tests/fuzz/fuzz.h runtime/ctl/wire.c runtime/ctl/wire.h qp/nic.h ring/base/log.c \
                      qp/cma/host.c qp/cma/rkey.c qp/cma/objects.h $(WIRE_FUZZ_VERBS) qp/verbs/verbs.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_wire.c runtime/ctl/wire.c qp/cma/host.c qp/cma/rkey.c \
	  ring/base/log.c $(WIRE_FUZZ_VERBS) -Wno-string-concatenation -libverbs -pthread -o $@

build-fuzz/fuzz_meta: $(FUZZ_META_SRCS) tests/fuzz/fuzz.h $(wildcard runtime/ctl/meta/*.h) runtime/ctl/sock.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_META_SRCS) $(STORE_LIBS) -pthread -o $@

CTL_FUZZ_SRCS := $(addprefix runtime/ctl/,auth.c batch.c cap.c client.c many.c pool.c server.c \
                   serve.c sock.c wire.c) qp/auth/auth.c ring/base/log.c ring/base/fd.c ring/base/clock.c
build-fuzz/fuzz_ctl: tests/fuzz/fuzz_ctl.c tests/fuzz/fuzz.h $(CTL_FUZZ_SRCS) $(wildcard runtime/ctl/*.h) qp/auth/auth.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_ctl.c $(CTL_FUZZ_SRCS) -lsodium -pthread -o $@

TCP_FUZZ_SRCS := $(sort $(wildcard qp/tcp/*.c qp/soft/*.c)) qp/auth/auth.c ring/base/log.c ring/base/fd.c \
                 ring/base/clock.c
build-fuzz/fuzz_tcp: tests/fuzz/fuzz_tcp.c tests/fuzz/fuzz.h $(TCP_FUZZ_SRCS) $(wildcard qp/tcp/*.h qp/soft/*.h) \
                     qp/nic.h
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_tcp.c $(TCP_FUZZ_SRCS) -lsodium -pthread -o $@

clean:
	rm -rf build build-asan build-tsan build-fuzz

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

# The two commands of the README: `make run` (build, then serve the default model) and
# `make test` (build, then every test and the format check, then the sanitizer runs and every fuzz
# target for TEST_FUZZ_SECONDS). Both install what they need first. Parts of `make test`:
#   make test-fast   the normal build, ctest, the format check
#   make sanitize    ASan+UBSan (all tests, -Wthread-safety) and TSan (engine, kernels, metrics,
#                    server) in build-asan/ and build-tsan/ (scripts/sanitize.sh)
#   make fuzz        each libFuzzer target for FUZZ_SECONDS (default 60), two at a time, built in
#                    build-asan/, corpora and findings in build-fuzz/ (scripts/fuzz.sh; longer:
#                    make fuzz FUZZ_SECONDS=600); random
#                    seeds, but `make test` fixes FUZZ_SEED=1 so that its verdict on a commit
#                    does not change from run to run (long random runs find the rest), and runs
#                    each target TEST_FUZZ_SECONDS (default 30)
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PORT ?= 8000
FUZZ_SECONDS ?= 60
# `make test`'s fuzzing time per target: with its fixed seed it re-runs the same inputs on every
# commit (a regression check, beside ctest's replay of the corpora), so half a minute does it;
# longer random runs are `make fuzz`.
TEST_FUZZ_SECONDS ?= 30

.PHONY: all setup configure build run test test-fast sanitize fuzz format-check format clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DTINYSERVE_WERROR=ON $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 \
	  || (cat $(BUILD_DIR).configure.log; exit 1)
	@grep 'tinyserve:' $(BUILD_DIR).configure.log || true

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	./$(BUILD_DIR)/bin/tinyserve serve --port $(PORT)

# One after the other (not as prerequisites, so that `make -j test` keeps this order).
test: test-fast
	@$(MAKE) --no-print-directory sanitize
	@$(MAKE) --no-print-directory fuzz FUZZ_SEED=$(or $(FUZZ_SEED),1) FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)

test-fast: build format-check
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

sanitize: setup
	@JOBS=$(JOBS) bash scripts/sanitize.sh

fuzz: setup
	@FUZZ_JOBS=2 FUZZ_SEED=$(FUZZ_SEED) bash scripts/fuzz.sh $(FUZZ_SECONDS)

format-check:
	@bash scripts/check-format.sh

format:
	@bash scripts/check-format.sh --fix

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log build-asan build-tsan build-fuzz \
	  build-asan.configure.log build-tsan.configure.log build-fuzz.configure.log

# The two commands of the README: `make run` (build, then serve the default model) and
# `make test` (build, then every test and the format check). Both install what they need first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PORT ?= 8000

.PHONY: all setup configure build run test format-check format clean

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

test: build format-check
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

format-check:
	@bash scripts/check-format.sh

format:
	@bash scripts/check-format.sh --fix

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log

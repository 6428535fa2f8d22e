# The two commands of the README, and the install. `make run`: install what
# running needs, build and run the main job (the LLM worker); `make run-sd`:
# the same for the SD worker on its bundled model; `make test`: install the test
# toolchain too, build and run the whole test suite; `make install
# PREFIX=/usr/local [DESTDIR=/tmp/stage]`: build and install (programs, man
# pages, bundled models, headers, librbee.a and rbee.pc).
.PHONY: run run-sd test build install clean

PREFIX ?= /usr/local
# make run / make install build here, without the tests (make test uses build/gcc)
BUILD ?= build/release

build:
	scripts/setup.sh run
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_TESTS=OFF \
	  -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD)

run: build
	RBEE_BUILD=$(BUILD) scripts/run-worker.sh

run-sd: build
	RBEE_BUILD=$(BUILD) scripts/run-sd-worker.sh

install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)

test:
	scripts/test.sh

clean:
	rm -rf build

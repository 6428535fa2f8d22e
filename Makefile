# The two commands of the README. `make run`: build and run the main job;
# `make test`: install dependencies, build and run the whole test suite.
.PHONY: run test build clean

build:
	scripts/setup.sh
	cmake -S . -B build/gcc -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/gcc

run: build
	scripts/run-worker.sh

test:
	scripts/test.sh

clean:
	rm -rf build

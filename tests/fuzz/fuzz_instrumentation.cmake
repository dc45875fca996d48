# XGRAD_BUILD_FUZZ: every target of the build (the library included) gets libFuzzer's coverage
# instrumentation and AddressSanitizer + UndefinedBehaviorSanitizer, so that the fuzz targets
# (tests/fuzz) see the library's branches and any out-of-bounds access, leak or undefined
# behaviour in it aborts the run as a finding. Only the fuzz programs link libFuzzer itself
# (-fsanitize=fuzzer, in tests/fuzz/CMakeLists.txt). Use a build folder of its own (build-fuzz).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "XGRAD_BUILD_FUZZ needs clang (libFuzzer): configure a build folder of its own with "
                      "CC=clang CXX=clang++ (the compiler found is ${CMAKE_CXX_COMPILER_ID})")
endif()
if(XGRAD_USE_CUDA)
  message(FATAL_ERROR "XGRAD_BUILD_FUZZ excludes XGRAD_USE_CUDA: configure with -DXGRAD_USE_CUDA=OFF")
endif()
set(XGRAD_FUZZ_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link;${XGRAD_FUZZ_SANITIZERS}>")
add_link_options(${XGRAD_FUZZ_SANITIZERS})

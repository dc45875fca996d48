# XGRAD_SANITIZE: build everything with AddressSanitizer and UndefinedBehaviorSanitizer, so the
# tests catch out-of-bounds accesses, leaks and undefined behaviour. Any undefined-behaviour
# report aborts the test (no recovery), so it cannot pass unnoticed.
option(XGRAD_SANITIZE "Build with -fsanitize=address,undefined" OFF)
if(XGRAD_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "XGRAD_SANITIZE needs GCC or Clang")
  endif()
  set(_xgrad_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_xgrad_san}>")
  add_link_options(${_xgrad_san})
endif()

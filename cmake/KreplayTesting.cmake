# Helpers for kreplay's C and C++ tests (c-tests/). Included by c-tests/CMakeLists.txt; every test folder
# registers its tests with kreplay_add_test() so that they all build and run the same way.
include_guard(GLOBAL)

find_package(Threads REQUIRED)

# Under ThreadSanitizer the simulated-device tests link an instrumented archive (cmake/KreplayTsanRust.cmake).
if("thread" IN_LIST KREPLAY_SANITIZE AND NOT TARGET kreplay::sim_tsan)
  include(KreplayTsanRust)
  kreplay_add_tsan_sim_library()
endif()

# kreplay_apply_sanitizers(<target>...)
#
# Adds the KREPLAY_SANITIZE sanitizers (e.g. "address;undefined" or "thread") to C and C++ targets. The Rust
# archive is not instrumented: ASan and UBSan still see every access the C/C++ side makes, which is where the
# host's bugs would be. Any UBSan finding fails the run instead of printing and carrying on.
function(kreplay_apply_sanitizers)
  if(NOT KREPLAY_SANITIZE)
    return()
  endif()
  string(JOIN "," kinds ${KREPLAY_SANITIZE})
  foreach(target IN LISTS ARGN)
    target_compile_options(${target} PRIVATE
      "-fsanitize=${kinds}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE "-fsanitize=${kinds}")
  endforeach()
endfunction()

# kreplay_add_test(NAME <name> SOURCES <file>... [SIM] [LABELS <label>...] [LIBRARIES <library>...])
#
# Builds the executable <name> from SOURCES (.c as strict ISO C99, .cpp as C++17; define _POSIX_C_SOURCE in
# a C source that needs POSIX calls) with -Wall -Wextra -Wpedantic -Werror, links it to kreplay::sim when
# SIM is given (the simulated device; KREPLAY_SIM=1 is defined) or else to the production kreplay::kreplay,
# plus LIBRARIES (e.g. Threads::Threads), and registers it with ctest under the label `unittests` plus
# LABELS, with a 300 s timeout. The executable is one process, so it gets a fresh library singleton.
function(kreplay_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "SIM" "NAME" "SOURCES;LABELS;LIBRARIES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kreplay_add_test: unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_NAME OR NOT arg_SOURCES)
    message(FATAL_ERROR "kreplay_add_test: NAME and SOURCES are required")
  endif()
  if(arg_SIM AND TARGET kreplay::sim_tsan)
    set(library kreplay::sim_tsan)
  elseif(arg_SIM)
    set(library kreplay::sim)
  else()
    set(library kreplay::kreplay)
  endif()

  add_executable(${arg_NAME} ${arg_SOURCES})
  set_target_properties(${arg_NAME} PROPERTIES
    C_STANDARD 99
    C_STANDARD_REQUIRED ON
    C_EXTENSIONS OFF
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    # Imported include directories are -isystem by default, which would hide warnings in kreplay.h and
    # kreplay.hpp; the tests are where those headers must prove they compile cleanly.
    NO_SYSTEM_FROM_IMPORTED ON)
  target_compile_options(${arg_NAME} PRIVATE
    "$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra;-Wpedantic;-Werror>")
  target_link_libraries(${arg_NAME} PRIVATE ${library} ${arg_LIBRARIES})
  kreplay_apply_sanitizers(${arg_NAME})

  add_test(NAME ${arg_NAME} COMMAND ${arg_NAME})
  set(labels unittests ${arg_LABELS})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${arg_NAME} PROPERTIES LABELS "${labels}" TIMEOUT 300)
endfunction()

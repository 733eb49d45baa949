# Test script (cmake -P): the native libraries rustc reports for the kreplay-capi staticlib must be exactly
# the pinned list in cmake/native-static-libs.txt, which kreplay::kreplay, the package config and
# docs/integration.md all rely on. With KREPLAY_BLESS set in the environment, rewrites the pinned list instead.
#
# Arguments: -DCARGO=<cargo> -DSOURCE_DIR=<repository root> -DTARGET_DIR=<cargo target dir>
#            -DPINNED_FILE=<cmake/native-static-libs.txt>
cmake_minimum_required(VERSION 3.21)

foreach(argument IN ITEMS CARGO SOURCE_DIR TARGET_DIR PINNED_FILE)
  if(NOT DEFINED ${argument})
    message(FATAL_ERROR "CheckNativeStaticLibs.cmake: -D${argument}=... is required")
  endif()
endforeach()

execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env "CARGO_TARGET_DIR=${TARGET_DIR}"
          "${CARGO}" rustc --manifest-path "${SOURCE_DIR}/Cargo.toml" -p kreplay-capi --lib
          --crate-type staticlib -- --print native-static-libs
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cargo rustc failed (${result}):\n${output}")
endif()
if(NOT output MATCHES "native-static-libs: ([^\r\n]*)")
  message(FATAL_ERROR "rustc printed no native-static-libs line:\n${output}")
endif()
string(STRIP "${CMAKE_MATCH_1}" reported)
separate_arguments(reported_items UNIX_COMMAND "${reported}")
string(JOIN " " reported ${reported_items})

file(STRINGS "${PINNED_FILE}" pinned_lines REGEX "^[^#]")
string(JOIN " " pinned_text ${pinned_lines})
separate_arguments(pinned_items UNIX_COMMAND "${pinned_text}")
string(JOIN " " pinned ${pinned_items})

if(reported STREQUAL pinned)
  message(STATUS "native-static-libs match the pinned list: ${pinned}")
  return()
endif()

if(DEFINED ENV{KREPLAY_BLESS})
  file(STRINGS "${PINNED_FILE}" comment_lines REGEX "^#")
  string(JOIN "\n" comments ${comment_lines})
  file(WRITE "${PINNED_FILE}" "${comments}\n${reported}\n")
  message(STATUS "rewrote ${PINNED_FILE}: ${reported} (update docs/integration.md to match)")
  return()
endif()

message(FATAL_ERROR
  "rustc now reports different native libraries for libkreplay.a than the pinned list.\n"
  "  reported: ${reported}\n"
  "  pinned:   ${pinned}\n"
  "If the change is intended, run this test with KREPLAY_BLESS=1 to update ${PINNED_FILE}, and update the "
  "link line in docs/integration.md.")

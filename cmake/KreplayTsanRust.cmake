# ThreadSanitizer for the Rust side too (KREPLAY_SANITIZE=thread, i.e. the `tsan` preset).
#
# An uninstrumented libkreplay.a synchronises through atomics ThreadSanitizer cannot see (the inventory's spin
# lock, the staging pools, the simulated device's mutex), so every access it orders looks like a data race:
# a restore's copy into a region and the owner's read after record_free, two record_alloc calls writing the
# table. Suppressing those would also hide the races the concurrency tests exist to find. Instead this builds
# the simulated-device archive with `-Zsanitizer=thread` and `-Zbuild-std` (nightly and its rust-src
# component), so ThreadSanitizer sees the library's synchronisation and reports only real races.
#
# Defines kreplay::sim_tsan when nightly can build it; kreplay_add_test() then links SIM tests to it.
# Without nightly it warns and the tests keep kreplay::sim (and their false positives).
include_guard(GLOBAL)

function(kreplay_add_tsan_sim_library)
  find_program(KREPLAY_RUSTUP rustup HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin")
  set(nightly_ok FALSE)
  if(KREPLAY_RUSTUP)
    execute_process(COMMAND "${KREPLAY_RUSTUP}" run nightly rustc --print sysroot
      RESULT_VARIABLE result OUTPUT_VARIABLE sysroot ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND "${KREPLAY_RUSTUP}" run nightly rustc -vV
      RESULT_VARIABLE host_result OUTPUT_VARIABLE version_text ERROR_QUIET)
    if(result EQUAL 0 AND host_result EQUAL 0 AND EXISTS "${sysroot}/lib/rustlib/src/rust/library"
       AND version_text MATCHES "host: ([^\n]+)")
      set(nightly_ok TRUE)
      set(host "${CMAKE_MATCH_1}")
    endif()
  endif()
  if(NOT nightly_ok)
    message(WARNING "KREPLAY_SANITIZE=thread: nightly Rust with rust-src was not found (rustup toolchain install "
                    "nightly --component rust-src), so libkreplay.a is not instrumented and ThreadSanitizer will "
                    "report its internal synchronisation as data races.")
    return()
  endif()

  set(target_dir "${KREPLAY_BINARY_DIR}/cargo/sim-tsan")
  set(archive "${target_dir}/${host}/debug/${CMAKE_STATIC_LIBRARY_PREFIX}kreplay${CMAKE_STATIC_LIBRARY_SUFFIX}")
  add_custom_command(
    OUTPUT "${archive}"
    COMMAND "${CMAKE_COMMAND}" -E env
            "CARGO_TARGET_DIR=${target_dir}"
            "RUSTFLAGS=-Zsanitizer=thread"
            "KREPLAY_MAX_TRACKED_REGIONS=${KREPLAY_MAX_TRACKED_REGIONS}"
            "${KREPLAY_RUSTUP}" run nightly cargo build
            --manifest-path "${KREPLAY_SOURCE_DIR}/Cargo.toml"
            -Zbuild-std --target "${host}" -p kreplay-capi --lib --features sim
    COMMAND "${CMAKE_COMMAND}" -E touch "${archive}"
    DEPENDS ${KREPLAY_RUST_INPUTS}
    WORKING_DIRECTORY "${KREPLAY_SOURCE_DIR}"
    COMMENT "cargo +nightly: building the simulated-device archive under ThreadSanitizer"
    USES_TERMINAL
    VERBATIM)
  add_custom_target(kreplay_sim_tsan_cargo DEPENDS "${archive}")

  # LLVM's instrumentation calls __tsan_memcpy/memmove/memset, which GCC's libtsan (GCC 12) lacks.
  add_library(kreplay_tsan_intrinsics STATIC "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tsan_rust_intrinsics.c")
  target_compile_options(kreplay_tsan_intrinsics PRIVATE -fsanitize=thread)

  add_library(kreplay::sim_tsan STATIC IMPORTED GLOBAL)
  set_target_properties(kreplay::sim_tsan PROPERTIES
    IMPORTED_LOCATION "${archive}"
    IMPORTED_LINK_INTERFACE_LANGUAGES C
    INTERFACE_INCLUDE_DIRECTORIES "${KREPLAY_SOURCE_DIR}/include"
    INTERFACE_COMPILE_DEFINITIONS KREPLAY_SIM=1
    INTERFACE_LINK_LIBRARIES "kreplay_tsan_intrinsics;${KREPLAY_NATIVE_STATIC_LIBS}")
  add_dependencies(kreplay::sim_tsan kreplay_sim_tsan_cargo)
endfunction()

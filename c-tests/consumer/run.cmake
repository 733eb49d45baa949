# Test script (cmake -P) for kreplay_consumer_add_subdirectory: configures, builds and runs the consumer
# project in this folder, then checks what its shared library exports and that kreplay, as a subproject,
# registered no tests and installed nothing.
#
# Arguments: -DKREPLAY_ROOT= -DWORK_DIR= -DGENERATOR= -DMAKE_PROGRAM= -DC_COMPILER= -DCXX_COMPILER=
#            -DBUILD_TYPE= -DCARGO= -DNM=
cmake_minimum_required(VERSION 3.21)

foreach(argument IN ITEMS KREPLAY_ROOT WORK_DIR GENERATOR C_COMPILER CXX_COMPILER BUILD_TYPE CARGO NM)
  if(NOT DEFINED ${argument} OR "${${argument}}" STREQUAL "")
    message(FATAL_ERROR "consumer/run.cmake: -D${argument}=... is required")
  endif()
endforeach()

get_filename_component(cmake_bin_dir "${CMAKE_COMMAND}" DIRECTORY)
find_program(CTEST ctest HINTS "${cmake_bin_dir}" NO_DEFAULT_PATH REQUIRED)

function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(build_dir "${WORK_DIR}/build")
set(out_dir "${build_dir}/out")
# A fresh configure every run; kreplay-build/cargo survives, so cargo only rebuilds what changed.
file(REMOVE_RECURSE "${build_dir}/CMakeCache.txt" "${build_dir}/CMakeFiles" "${out_dir}")

set(configure_args -S "${CMAKE_CURRENT_LIST_DIR}" -B "${build_dir}" -G "${GENERATOR}"
  "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}" "-DKREPLAY_ROOT=${KREPLAY_ROOT}" "-DKREPLAY_CARGO=${CARGO}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run_step("configuring the consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("building the consumer" "${CMAKE_COMMAND}" --build "${build_dir}" --config "${BUILD_TYPE}")

run_step("running the consumer" "${out_dir}/profiler_app")
message(STATUS "${step_output}")
if(NOT step_output MATCHES "consumer: all checks passed")
  message(FATAL_ERROR "the consumer did not report success:\n${step_output}")
endif()

# The dynamic symbols a shared library defines, one name per list item.
function(exported_symbols library out_var)
  run_step("nm -D --defined-only ${library}" "${NM}" -D --defined-only "${library}")
  string(REPLACE "\n" ";" lines "${step_output}")
  set(names "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ ]+)$")
      list(APPEND names "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out_var} "${names}" PARENT_SCOPE)
endfunction()

# Only the tool's own functions may be exported: no kreplay_* entry point, no Rust symbol (legacy _ZN...17h
# or v0 _R mangling, rust_* and __rust_* runtime hooks). The linker's section markers are harmless.
foreach(library IN ITEMS libprofiler_tool.so libprofiler_tool_narrow.so)
  exported_symbols("${out_dir}/${library}" names)
  set(foreign "")
  foreach(name IN LISTS names)
    if(NOT name MATCHES "^profiler_" AND NOT name MATCHES "^(_init|_fini|_edata|_end|__bss_start)$")
      list(APPEND foreign "${name}")
    endif()
  endforeach()
  if(foreign)
    list(LENGTH foreign count)
    list(SUBLIST foreign 0 20 shown)
    string(REPLACE ";" "\n  " shown "${shown}")
    message(FATAL_ERROR "${library} exports ${count} symbol(s) that are not its own, e.g.:\n  ${shown}")
  endif()
  if(NOT "profiler_staging_round_trip" IN_LIST names)
    message(FATAL_ERROR "${library} does not export its own profiler_staging_round_trip")
  endif()
  list(LENGTH names count)
  message(STATUS "${library}: exports only its own ${count} symbol(s)")
endforeach()

exported_symbols("${out_dir}/libprofiler_tool_leaky.so" names)
if(NOT "kreplay_staging_acquire" IN_LIST names)
  message(FATAL_ERROR "the control library linked without --exclude-libs does not export "
                      "kreplay_staging_acquire, so the symbol check above could not detect a leak")
endif()

# Subproject defaults: no tests registered anywhere under kreplay-build, nothing to install.
run_step("ctest -N" "${CTEST}" --test-dir "${build_dir}" -N -C "${BUILD_TYPE}")
if(NOT step_output MATCHES "Total Tests: 0")
  message(FATAL_ERROR "kreplay registered tests as a subproject:\n${step_output}")
endif()
set(prefix "${WORK_DIR}/install")
file(REMOVE_RECURSE "${prefix}")
run_step("cmake --install" "${CMAKE_COMMAND}" --install "${build_dir}" --prefix "${prefix}" --config "${BUILD_TYPE}")
file(GLOB_RECURSE installed "${prefix}/*")
if(installed)
  message(FATAL_ERROR "kreplay installed files as a subproject:\n${installed}")
endif()
message(STATUS "as a subproject kreplay registered no tests and installed nothing")

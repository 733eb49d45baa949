# Test script (cmake -P) for kreplay_engine_state_is_zero_initialised: the process-wide engine is tens of
# megabytes of fixed tables. It must start all zero, so that it lands in .bss and costs a host nothing until used;
# one non-zero initial byte anywhere in it puts all of it into .data, in every binary that links kreplay (this
# happened once: 44 MB). Arguments: -DNM= -DARCHIVE=
cmake_minimum_required(VERSION 3.21)
foreach(argument IN ITEMS NM ARCHIVE)
  if(NOT DEFINED ${argument} OR "${${argument}}" STREQUAL "")
    message(FATAL_ERROR "engine-bss/check.cmake: -D${argument}=... is required")
  endif()
endforeach()
execute_process(COMMAND "${NM}" --defined-only "${ARCHIVE}" RESULT_VARIABLE result OUTPUT_VARIABLE symbols
                ERROR_VARIABLE errors)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${NM} ${ARCHIVE} failed (${result}): ${errors}")
endif()
# The engine is kreplay::ENGINE (mangled, with a hash): ... 6ENGINE17h<hash>E.
string(REGEX MATCHALL "[0-9a-f]+ [A-Za-z] [^\n]*6ENGINE17h[0-9a-f]+E" engines "${symbols}")
if(NOT engines)
  message(FATAL_ERROR "no kreplay::ENGINE symbol found in ${ARCHIVE}")
endif()
foreach(line IN LISTS engines)
  string(REGEX MATCH "^[0-9a-f]+ ([A-Za-z]) " _ "${line}")
  if(NOT CMAKE_MATCH_1 MATCHES "^[bB]$")
    message(FATAL_ERROR "kreplay::ENGINE is not in .bss (nm type '${CMAKE_MATCH_1}'): some initial value in the "
                        "engine is not zero, which puts all of it into initialised data: ${line}")
  endif()
endforeach()
message(STATUS "kreplay::ENGINE is zero-initialised (.bss)")

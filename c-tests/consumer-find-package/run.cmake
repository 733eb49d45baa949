# Test script (cmake -P) for kreplay_find_package_after_install: installs the kreplay build into a prefix
# inside the build tree, then configures, builds and runs the project in this folder against it with
# find_package(kreplay).
#
# Arguments: -DKREPLAY_BUILD_DIR= -DKREPLAY_VERSION= -DWORK_DIR= -DGENERATOR= -DMAKE_PROGRAM= -DC_COMPILER=
#            -DCXX_COMPILER= -DBUILD_TYPE= -DEXPECTED_ADAPTERS= (comma-separated: hsa, cuda; may be empty)
#            -DLINK_FLAGS= (optional: linker flags for the consumer, e.g. the sanitizer runtimes)
#            -DCUDA_ROOT_DIR= (optional: the CUDA toolkit the adapter was built with, for find_package(CUDAToolkit))
cmake_minimum_required(VERSION 3.21)

foreach(argument IN ITEMS KREPLAY_BUILD_DIR KREPLAY_VERSION WORK_DIR GENERATOR C_COMPILER CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${argument} OR "${${argument}}" STREQUAL "")
    message(FATAL_ERROR "consumer-find-package/run.cmake: -D${argument}=... is required")
  endif()
endforeach()

function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${description} failed (${result}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(build_dir "${WORK_DIR}/build")
file(REMOVE_RECURSE "${prefix}" "${build_dir}")

run_step("cmake --install" "${CMAKE_COMMAND}" --install "${KREPLAY_BUILD_DIR}" --prefix "${prefix}"
         --config "${BUILD_TYPE}")
string(REPLACE "," ";" expected_adapters "${EXPECTED_ADAPTERS}")
set(expected_files include/kreplay.h include/kreplay.hpp lib/libkreplay.a lib/cmake/kreplay/kreplayConfig.cmake
                   lib/cmake/kreplay/kreplayConfigVersion.cmake)
if(expected_adapters)
  list(APPEND expected_files lib/cmake/kreplay/kreplayTargets.cmake)
endif()
if("hsa" IN_LIST expected_adapters)
  list(APPEND expected_files include/kreplay/hsa.hpp lib/libkreplay_hsa.a)
endif()
foreach(file IN LISTS expected_files)
  # GNUInstallDirs may choose lib64 on some distributions.
  string(REPLACE "lib/" "lib*/" pattern "${file}")
  file(GLOB found "${prefix}/${pattern}")
  if(NOT found)
    message(FATAL_ERROR "cmake --install did not install ${file}")
  endif()
endforeach()

# The package must be relocatable: nothing in it may point back into the build or source tree.
get_filename_component(source_dir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
file(GLOB_RECURSE config_files "${prefix}/lib*/cmake/kreplay/*.cmake")
foreach(config IN LISTS config_files)
  file(READ "${config}" text)
  foreach(tree IN ITEMS "${KREPLAY_BUILD_DIR}" "${source_dir}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${config} refers to ${tree}, which an installed package must not need")
    endif()
  endforeach()
endforeach()

set(configure_args -S "${CMAKE_CURRENT_LIST_DIR}" -B "${build_dir}" -G "${GENERATOR}"
  "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DEXPECTED_VERSION=${KREPLAY_VERSION}" "-DEXPECTED_ADAPTERS=${EXPECTED_ADAPTERS}"
  # Only the prefix above may satisfy find_package, never a kreplay installed elsewhere on the machine.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CUDA_ROOT_DIR)
  list(APPEND configure_args "-DCUDAToolkit_ROOT=${CUDA_ROOT_DIR}")
endif()
if(LINK_FLAGS)
  # A sanitizer build installs instrumented adapters: the consumer links the sanitizer runtimes too.
  list(APPEND configure_args "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")
endif()
run_step("configuring the find_package consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("building the find_package consumer" "${CMAKE_COMMAND}" --build "${build_dir}" --config "${BUILD_TYPE}")

set(apps "find_package_app=find_package consumer")
if("hsa" IN_LIST expected_adapters)
  list(APPEND apps "find_package_hsa_app=find_package hsa consumer")
endif()
foreach(entry IN LISTS apps)
  string(REPLACE "=" ";" entry "${entry}")
  list(GET entry 0 name)
  list(GET entry 1 banner)
  file(GLOB_RECURSE app "${build_dir}/${name}")
  if(NOT app)
    message(FATAL_ERROR "${name} was not built")
  endif()
  list(GET app 0 app)
  run_step("running ${name}" "${app}")
  message(STATUS "${step_output}")
  if(NOT step_output MATCHES "${banner}: all checks passed")
    message(FATAL_ERROR "${name} did not report success:\n${step_output}")
  endif()
endforeach()

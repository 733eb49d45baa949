# kreplay_import_prebuilt(ROOT <kreplay source root>)
#
# For the standalone GPU builds (c-tests/cuda, c-tests/cuda/gpu/inject) on a machine without Rust: defines
# kreplay::kreplay from an archive built elsewhere (cache variable KREPLAY_PREBUILT_LIB; its header from
# KREPLAY_INCLUDE_DIR), with the system libraries pinned for the main build (cmake/native-static-libs.txt),
# then adds the adapters' common code and kreplay::cuda.
function(kreplay_import_prebuilt)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "ROOT" "")
  set(KREPLAY_PREBUILT_LIB "" CACHE FILEPATH "libkreplay.a built elsewhere (cargo build --release -p kreplay-capi)")
  set(KREPLAY_INCLUDE_DIR "${arg_ROOT}/include" CACHE PATH "Directory holding kreplay.h")
  if(NOT EXISTS "${KREPLAY_PREBUILT_LIB}")
    message(FATAL_ERROR "standalone build: set KREPLAY_PREBUILT_LIB to an existing libkreplay.a")
  endif()
  set(native_libs_file "${arg_ROOT}/cmake/native-static-libs.txt")
  if(EXISTS "${native_libs_file}")
    file(STRINGS "${native_libs_file}" native_lines REGEX "^[^#]")
    string(JOIN " " native_text ${native_lines})
    separate_arguments(native_libs UNIX_COMMAND "${native_text}")
  else()
    set(native_libs -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)
  endif()
  add_library(kreplay::kreplay STATIC IMPORTED GLOBAL)
  set_target_properties(kreplay::kreplay PROPERTIES
    IMPORTED_LOCATION "${KREPLAY_PREBUILT_LIB}"
    IMPORTED_LINK_INTERFACE_LANGUAGES C
    INTERFACE_INCLUDE_DIRECTORIES "${KREPLAY_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${native_libs}")
  add_subdirectory("${arg_ROOT}/adapters/common" "${CMAKE_CURRENT_BINARY_DIR}/adapter-common")
  add_subdirectory("${arg_ROOT}/adapters/cuda" "${CMAKE_CURRENT_BINARY_DIR}/adapter")
endfunction()

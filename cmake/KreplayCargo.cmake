# Builds the kreplay-capi crate with cargo and wraps each archive in an imported CMake target.
#
# Expects KREPLAY_SOURCE_DIR (the repository root) and KREPLAY_MAX_TRACKED_REGIONS to be set by the caller.
include_guard(GLOBAL)

# PATH first, so that whichever toolchain the user's shell runs is the one that builds the archive.
find_program(KREPLAY_CARGO cargo
  PATHS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin"
  DOC "cargo, which builds libkreplay.a"
  REQUIRED)

set(KREPLAY_NATIVE_STATIC_LIBS_FILE "${CMAKE_CURRENT_LIST_DIR}/native-static-libs.txt")

# kreplay_read_native_static_libs(<out-var>)
#
# The pinned linker items, kept as `-l<name>` flags rather than bare names: a bare `util` or `rt` would resolve
# to a host project's target of that name instead of the system library.
function(kreplay_read_native_static_libs out_var)
  file(STRINGS "${KREPLAY_NATIVE_STATIC_LIBS_FILE}" lines REGEX "^[^#]")
  string(JOIN " " text ${lines})
  separate_arguments(items UNIX_COMMAND "${text}")
  set(${out_var} "${items}" PARENT_SCOPE)
endfunction()

kreplay_read_native_static_libs(KREPLAY_NATIVE_STATIC_LIBS)

# Everything whose change can change the archive. CONFIGURE_DEPENDS makes the build re-glob, so a new module
# file is picked up without re-running cmake by hand. Cargo's own fingerprints decide what really rebuilds.
file(GLOB_RECURSE KREPLAY_RUST_INPUTS CONFIGURE_DEPENDS
  "${KREPLAY_SOURCE_DIR}/core/*.rs"
  "${KREPLAY_SOURCE_DIR}/capi/*.rs")
foreach(file IN ITEMS Cargo.toml Cargo.lock core/Cargo.toml capi/Cargo.toml
                      .cargo/config.toml rust-toolchain rust-toolchain.toml)
  if(EXISTS "${KREPLAY_SOURCE_DIR}/${file}")
    list(APPEND KREPLAY_RUST_INPUTS "${KREPLAY_SOURCE_DIR}/${file}")
  endif()
endforeach()

# kreplay_add_cargo_library(<imported-target> TARGET_DIR <dir> [ALL] [FEATURES <feature>...]
#                           [COMPILE_DEFINITIONS <definition>...])
#
# Runs `cargo build -p kreplay-capi` with CARGO_TARGET_DIR=<dir> (Debug: dev profile; any other build type,
# or none: --release) and defines <imported-target> as a STATIC IMPORTED GLOBAL library carrying the archive,
# include/ and the pinned native libraries. ALL builds the archive with the default build target even when
# nothing links it (the install rules need it); otherwise it is built when a target that links it is.
function(kreplay_add_cargo_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "ALL" "TARGET_DIR" "FEATURES;COMPILE_DEFINITIONS")
  if(NOT arg_TARGET_DIR)
    message(FATAL_ERROR "kreplay_add_cargo_library(${target}): TARGET_DIR is required")
  endif()
  set(archive_name "${CMAKE_STATIC_LIBRARY_PREFIX}kreplay${CMAKE_STATIC_LIBRARY_SUFFIX}")
  set(feature_args "")
  if(arg_FEATURES)
    string(JOIN "," features ${arg_FEATURES})
    set(feature_args --features "${features}")
  endif()

  get_property(multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(multi_config)
    set(profile_dir "$<IF:$<CONFIG:Debug>,debug,release>")
    set(release_arg "$<$<NOT:$<CONFIG:Debug>>:--release>")
  else()
    string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
    if(build_type STREQUAL "DEBUG")
      set(profile_dir debug)
      set(release_arg "")
    else()
      set(profile_dir release)
      set(release_arg --release)
    endif()
  endif()
  set(archive "${arg_TARGET_DIR}/${profile_dir}/${archive_name}")

  # Makefile generators do not rerun a command whose command line changed; this file changes whenever a
  # setting baked into the archive does, and the command depends on it.
  string(REPLACE "::" "_" stamp_name "${target}")
  set(settings_file "${arg_TARGET_DIR}/${stamp_name}.settings")
  file(CONFIGURE OUTPUT "${settings_file}" CONTENT
    "cargo=${KREPLAY_CARGO}\nfeatures=${arg_FEATURES}\nKREPLAY_MAX_TRACKED_REGIONS=${KREPLAY_MAX_TRACKED_REGIONS}\n")

  add_custom_command(
    OUTPUT "${archive}"
    COMMAND "${CMAKE_COMMAND}" -E env
            "CARGO_TARGET_DIR=${arg_TARGET_DIR}"
            "KREPLAY_MAX_TRACKED_REGIONS=${KREPLAY_MAX_TRACKED_REGIONS}"
            "${KREPLAY_CARGO}" build
            --manifest-path "${KREPLAY_SOURCE_DIR}/Cargo.toml"
            -p kreplay-capi --lib ${release_arg} ${feature_args}
    # Cargo leaves an up-to-date archive untouched; without the touch an edit that changes nothing in it
    # (a test file, a comment) would make every later build run cargo again.
    COMMAND "${CMAKE_COMMAND}" -E touch "${archive}"
    DEPENDS ${KREPLAY_RUST_INPUTS} "${settings_file}"
    WORKING_DIRECTORY "${KREPLAY_SOURCE_DIR}"
    COMMENT "cargo: building ${target} (${profile_dir} profile) in ${arg_TARGET_DIR}"
    USES_TERMINAL
    COMMAND_EXPAND_LISTS
    VERBATIM)
  if(arg_ALL)
    set(all_arg ALL)
  else()
    set(all_arg "")
  endif()
  add_custom_target(${stamp_name}_cargo ${all_arg} DEPENDS "${archive}")

  add_library(${target} STATIC IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LINK_INTERFACE_LANGUAGES C
    INTERFACE_INCLUDE_DIRECTORIES "${KREPLAY_SOURCE_DIR}/include"
    INTERFACE_LINK_LIBRARIES "${KREPLAY_NATIVE_STATIC_LIBS}")
  if(arg_COMPILE_DEFINITIONS)
    set_property(TARGET ${target} PROPERTY INTERFACE_COMPILE_DEFINITIONS ${arg_COMPILE_DEFINITIONS})
  endif()
  if(multi_config)
    foreach(config IN LISTS CMAKE_CONFIGURATION_TYPES)
      string(TOUPPER "${config}" config_upper)
      if(config_upper STREQUAL "DEBUG")
        set(location "${arg_TARGET_DIR}/debug/${archive_name}")
      else()
        set(location "${arg_TARGET_DIR}/release/${archive_name}")
      endif()
      set_property(TARGET ${target} APPEND PROPERTY IMPORTED_CONFIGURATIONS ${config_upper})
      set_property(TARGET ${target} PROPERTY IMPORTED_LOCATION_${config_upper} "${location}")
    endforeach()
  else()
    set_property(TARGET ${target} PROPERTY IMPORTED_LOCATION "${archive}")
  endif()
  add_dependencies(${target} ${stamp_name}_cargo)
endfunction()

# How an adapter target (kreplay::hsa, kreplay::cuda) becomes part of the installed CMake package.
#
# Every adapter joins one export set, kreplayTargets. The top-level install section writes it as
# kreplayTargets.cmake with the kreplay:: namespace, and kreplayConfig.cmake includes that file after it has
# defined kreplay::kreplay (the cargo archive is an imported target, so it cannot be exported itself; the
# adapters' link to it is written into the export as the name kreplay::kreplay).
include_guard(GLOBAL)

include(GNUInstallDirs)

# kreplay_export_adapter(<target> COMPONENT <name> [INCLUDE_DIR <dir>])
#
# With KREPLAY_INSTALL on: installs the archive of <target> into the library directory and the contents of
# <dir> (the adapter's public headers, e.g. include/ holding kreplay/hsa.hpp) into the include directory, and
# adds <target> to the export set under the name kreplay::<name>. <name> is also the package component that
# find_package(kreplay COMPONENTS <name>) asks for. With KREPLAY_INSTALL off (kreplay added with
# add_subdirectory), nothing happens.
#
# <target>'s own include directories must use $<BUILD_INTERFACE:...> for source-tree paths; the installed
# include directory is added here.
function(kreplay_export_adapter target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "COMPONENT;INCLUDE_DIR" "")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_COMPONENT)
    message(FATAL_ERROR "kreplay_export_adapter(${target} COMPONENT <name> [INCLUDE_DIR <dir>]): "
                        "got '${ARGN}'")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "kreplay_export_adapter: ${target} is not a target")
  endif()
  # The exported name is kreplay::<component>; the build tree's ALIAS of the same name stays as it is.
  set_target_properties(${target} PROPERTIES EXPORT_NAME "${arg_COMPONENT}")
  if(NOT KREPLAY_INSTALL)
    return()
  endif()
  target_include_directories(${target} INTERFACE "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  install(TARGETS ${target}
    EXPORT kreplayTargets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
  if(arg_INCLUDE_DIR)
    install(DIRECTORY "${arg_INCLUDE_DIR}/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  endif()
  set_property(GLOBAL APPEND PROPERTY KREPLAY_EXPORTED_COMPONENTS "${arg_COMPONENT}")
endfunction()

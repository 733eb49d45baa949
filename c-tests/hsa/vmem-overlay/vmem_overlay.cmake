# kreplay_hsa_vmem_overlay(<out_dir> <result_var>)
#
# Copies the ROCr headers from KREPLAY_HSA_INCLUDE_DIR to <out_dir>/hsa and adds what ROCm 6 added for virtual
# memory: the declarations (hsa_ext_amd_vmem.h, included at the end of hsa_ext_amd.h) and five AmdExtTable
# entries (appended to the struct, which is all a source build can tell apart). Where the headers lack
# hsa_amd_memory_async_copy_on_engine (KREPLAY_HSA_HAVE_COPY_ON_ENGINE false), it is added the same way
# (hsa_ext_amd_copy_engine.h and one entry), so that the overlay build has every wrapper. Sets <result_var>
# to TRUE on success, FALSE when the headers do not have the shape this expects (then the tests are not
# registered).
function(kreplay_hsa_vmem_overlay out_dir result_var)
  set(${result_var} FALSE PARENT_SCOPE)
  file(REMOVE_RECURSE "${out_dir}")
  file(COPY "${KREPLAY_HSA_INCLUDE_DIR}/hsa" DESTINATION "${out_dir}")
  set(trace_file "${out_dir}/hsa/hsa_api_trace.h")
  set(amd_file "${out_dir}/hsa/hsa_ext_amd.h")
  if(NOT EXISTS "${trace_file}" OR NOT EXISTS "${amd_file}")
    return()
  endif()

  file(READ "${trace_file}" trace)
  string(FIND "${trace}" "struct AmdExtTable {" start)
  if(start LESS 0)
    return()
  endif()
  string(SUBSTRING "${trace}" ${start} -1 tail)
  string(FIND "${tail}" "\n};" end)
  if(end LESS 0)
    return()
  endif()
  math(EXPR cut "${start} + ${end}")
  string(SUBSTRING "${trace}" 0 ${cut} head)
  string(SUBSTRING "${trace}" ${cut} -1 rest)
  string(CONCAT entries
    "\n  // Added by kreplay's vmem_overlay.cmake (test-only).\n"
    "  decltype(hsa_amd_vmem_map)* hsa_amd_vmem_map_fn;\n"
    "  decltype(hsa_amd_vmem_unmap)* hsa_amd_vmem_unmap_fn;\n"
    "  decltype(hsa_amd_vmem_get_alloc_properties_from_handle)* hsa_amd_vmem_get_alloc_properties_from_handle_fn;\n"
    "  decltype(hsa_amd_vmem_retain_alloc_handle)* hsa_amd_vmem_retain_alloc_handle_fn;\n"
    "  decltype(hsa_amd_vmem_handle_release)* hsa_amd_vmem_handle_release_fn;")
  if(NOT KREPLAY_HSA_HAVE_COPY_ON_ENGINE)
    string(APPEND entries
      "\n  decltype(hsa_amd_memory_async_copy_on_engine)* hsa_amd_memory_async_copy_on_engine_fn;")
  endif()
  file(WRITE "${trace_file}" "${head}${entries}${rest}")

  file(COPY "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/hsa_ext_amd_vmem.h" DESTINATION "${out_dir}/hsa")
  file(APPEND "${amd_file}" "\n/* Added by kreplay's vmem_overlay.cmake (test-only). */\n#include \"hsa_ext_amd_vmem.h\"\n")
  if(NOT KREPLAY_HSA_HAVE_COPY_ON_ENGINE)
    file(COPY "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/hsa_ext_amd_copy_engine.h" DESTINATION "${out_dir}/hsa")
    file(APPEND "${amd_file}" "#include \"hsa_ext_amd_copy_engine.h\"\n")
  endif()
  set(${result_var} TRUE PARENT_SCOPE)
endfunction()

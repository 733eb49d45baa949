/* kreplay HSA adapter: connects a host's intercepted HSA API tables (hsa/hsa_api_trace.h) to kreplay.
 *
 * A tool that intercepts ROCr through its API tables (rocprofiler-sdk, or any HSA tools library) needs four
 * things to use kreplay: the allocation entry points wrapped so that kreplay's inventory sees every device
 * allocation (and the async-copy entry points, so that replay windows are fenced against copies in flight),
 * a kreplay_device_ops_t built from the runtime's own (un-wrapped) functions, somewhere for
 * kreplay's messages to go, and a finalize call at teardown. This header is those four steps. The adapter
 * calls nothing of ROCr except through the function pointers the host hands in; it does not link
 * libhsa-runtime64.
 *
 * Typical sequence (see docs/integration.md, "rocprofiler-sdk: step by step"):
 *
 *   // In the tool's table registration, library instance 0, before the tables are used:
 *   kreplay::hsa::set_log_sink(my_sink, KREPLAY_LOG_INFO);
 *   kreplay::hsa::install(core_table, amd_ext_table, lib_instance);      // live tables: wrappers go in
 *   kreplay::hsa::configure(&saved_core, &saved_amd_ext, &options);      // captured, un-wrapped copies
 *   // When the kernel-replay service is configured:
 *   kreplay::hsa::set_policy(&policy);   // optional: pinning, budgets, window limits; keeps the module-scan cache
 *   kreplay_tracking_enable(true);
 *   // For each replayed dispatch, in a function of its own in the queue hooks (version 3, step 5 there):
 *   //   kreplay_replay_gate, then the per-agent writer lock and the drains of the agent's queues;
 *   //   kreplay_window_open(agent, &options, &window, &reason);  // fences async copies, waits for those in
 *   //                                                            // flight; DECLINED: run the dispatch once
 *   //   kreplay_snap(agent, &snapshot, &reason);                 // declined: close the window, run once
 *   //   pass 1; then kreplay_restore + pass, for each further pass
 *   //   kreplay_window_close(window, &outcome);                  // reopens the fence, logs the outcome line
 *   //   kreplay_snapshot_free(snapshot); the application's completion signal; the writer lock goes
 *   // At the tool's fini:
 *   kreplay::hsa::finalize();
 *
 * Every function here is thread-safe. None throws: failures are returned as status values. */

#ifndef KREPLAY_HSA_HPP
#define KREPLAY_HSA_HPP

#include <hsa/hsa.h>
#include <kreplay.h>

#include <cstddef>
#include <cstdint>

/* The API tables of hsa/hsa_api_trace.h. Declared here rather than included, because that header needs
 * AMD_INTERNAL_BUILD defined to find its siblings in an installed include tree; code that fills or reads
 * the tables includes it itself. */
struct CoreApiTable;
struct AmdExtTable;

namespace kreplay::hsa {

/* ---------------------------------------------------------------------------------------------------------
 * Installing the allocation wrappers
 * ------------------------------------------------------------------------------------------------------- */

/* The outcome of install(). Values are explicit and never reused. */
enum install_status_t : int {
  /* The wrappers are in the tables; the previous entries were saved and are called by the wrappers. */
  INSTALL_SUCCESS = 0,
  /* library_instance was not 0: nothing was touched. The adapter keeps one set of saved entries per process
   * (rocprofiler-sdk's convention: only instance 0 installs). Saving another instance's entries would either
   * send instance 0's calls to another runtime or, when those tables already hold the wrappers, make the
   * wrappers call themselves. */
  INSTALL_REFUSED_NOT_FIRST_INSTANCE = 1,
  /* An earlier install() succeeded in this process: nothing was touched, for the same reason. */
  INSTALL_REFUSED_ALREADY_INSTALLED = 2,
  /* A table was NULL, reported a size (version.minor_id) too small to hold the entries to wrap, or one of
   * those entries was NULL: nothing was touched. */
  INSTALL_REFUSED_INVALID_TABLE = 3,
};

/* A static, NUL-terminated name for status; never NULL, also for unknown values. */
const char* install_status_string(install_status_t status);

/* Saves the current entries of hsa_memory_allocate, hsa_memory_free (core table), hsa_amd_memory_pool_allocate
 * and hsa_amd_memory_pool_free (AMD extension table) -- and, in a build whose headers declare them and with a
 * runtime whose table holds them, hsa_amd_vmem_map and hsa_amd_vmem_unmap -- then writes wrappers in their
 * place. The wrappers call the saved entries and feed kreplay's inventory:
 *   - an allocation that succeeded is recorded with kreplay_record_alloc, with the pool allocation flags
 *     (hsa_memory_allocate has none: 0);
 *   - an allocation refused with HSA_STATUS_ERROR_OUT_OF_RESOURCES is tried once more after
 *     kreplay_device_trim_all() has given back the device memory kreplay holds idle for snapshots, so the
 *     application never fails for lack of memory that kreplay could have returned;
 *   - a free is recorded with kreplay_record_free before the saved free runs; if that free fails, the
 *     allocation is put back with kreplay_record_free_undo (same generation, so snapshots taken before still
 *     restore it);
 *   - a map that succeeded is recorded with kreplay_record_vmem_map and the owner of the memory handle's pool;
 *     an unmap is recorded with kreplay_record_vmem_unmap before the saved unmap runs.
 * The entries that change which code objects are loaded are wrapped too (core table: hsa_executable_destroy,
 * hsa_executable_freeze, hsa_executable_load_code_object, hsa_executable_load_program_code_object,
 * hsa_executable_load_agent_code_object, hsa_executable_global_variable_define,
 * hsa_executable_agent_global_variable_define, hsa_executable_readonly_variable_define): each calls
 * kreplay_modules_changed() after the saved entry (destroy also before it), so kreplay's cached module scans
 * never outlive a load or an unload. When every one of them is in the table, install() turns the module-scan
 * cache on: it sets kreplay's policy to the defaults with cache_module_scan = true (see set_policy() for a
 * host that sets its own policy afterwards). Otherwise the cache stays off and every snapshot scans.
 * Until kreplay_tracking_enable(true) the wrappers cost a couple of atomic loads around the runtime's call.
 *
 * The program's async copies are wrapped as well, for the replay window's fence (API version 3), when the tables
 * hold hsa_signal_load_relaxed and hsa_amd_signal_async_handler: hsa_amd_memory_async_copy,
 * hsa_amd_memory_async_copy_rect and -- in a build whose headers declare it -- hsa_amd_memory_async_copy_on_engine,
 * each where the table holds it. A wrapper calls kreplay_copy_begin with the agents the copy touches before the
 * saved entry (so it waits while a window of another thread is open on one of them), and kreplay_copy_end once
 * the copy's completion signal drops below the value it had at submission (an hsa_amd_signal_async_handler), or
 * at once when the runtime refuses the copy or the handler. The agents a copy touches: the ones the call names
 * (dst_agent and src_agent; the rect variant's copy_agent) and, once any window has been opened, the owners
 * hsa_amd_pointer_info reports for its two pointers (a call may name an agent other than the memory's owner).
 * Until the first window of the process each wrapper costs kreplay_copy_begin's one relaxed load: no signal
 * read, no handler, no query. A zero-byte copy, or one without a completion signal, is forwarded unfenced. A
 * copy that waits on dep_signals counts from its submission, so a window waits for it (up to its
 * copy_timeout_ms) while the copy waits for its dependencies. A copy whose signal the runtime will not watch
 * (hsa_amd_signal_async_handler refused) runs unfenced, with one WARNING for the process.
 *
 * core and amd_ext are the host's live tables, the ones the runtime dispatches through. Only library
 * instance 0 installs, and only once per process (see install_status_t). The wrappers stay for the life of
 * the process: there is no uninstall, because other tools may have copied the table entries since, and
 * after finalize() the wrappers only forward. Call it from the table registration, before other threads use
 * the tables. */
install_status_t install(CoreApiTable* core, AmdExtTable* amd_ext, std::uint64_t library_instance);

/* Whether install() wrapped every entry that changes which code objects are loaded, so that kreplay may cache
 * module scans (kreplay_policy_t::cache_module_scan). */
bool module_wrappers_installed();

/* kreplay_set_policy with cache_module_scan replaced by module_wrappers_installed(): the way for a host to set
 * its own policy (budgets, pinning, dirty-only) after install() without turning the cache off, or on where a
 * load would go unseen. Fields beyond policy->struct_size take kreplay's defaults, as in kreplay_set_policy.
 * A host that loads or destroys code objects through its own captured (un-wrapped) tables must call
 * kreplay_modules_changed() itself each time. Returns what kreplay_set_policy returns; NULL policy or a
 * struct_size below the version-1 fields: KREPLAY_STATUS_INVALID_ARGUMENT. */
kreplay_status_t set_policy(const kreplay_policy_t* policy);

/* The policy this adapter recommends, for set_policy(): kreplay's defaults with the live host budget on at
 * host_budget_percent = 50 (a capture declines with KREPLAY_DECLINE_HOST_BUDGET rather than let kreplay's host
 * staging pass half of the memory available; upstream's default) and cache_module_scan =
 * module_wrappers_installed(). Budgets on the device, pinning and dirty-only stay the host's choice
 * (docs/integration.md). install() itself keeps setting kreplay's defaults: a host opts in by passing this. */
kreplay_policy_t recommended_policy();

/* Whether this build of the adapter has the vmem wrappers compiled in (the ROCr headers it was built against
 * declare hsa_amd_vmem_map/unmap and hsa_amd_vmem_get_alloc_properties_from_handle). */
bool vmem_wrappers_compiled();

/* Whether install() put the vmem wrappers in (compiled in, and the runtime's table holds the entries). */
bool vmem_wrappers_installed();

/* Whether install() wrapped at least one async-copy entry for the replay window's fence (see install()). */
bool copy_wrappers_installed();

/* ---------------------------------------------------------------------------------------------------------
 * Configuring kreplay's device operations
 * ------------------------------------------------------------------------------------------------------- */

/* Called once per loaded executable; return HSA_STATUS_SUCCESS to continue, anything else to stop. */
typedef hsa_status_t (*executable_visitor_t)(hsa_executable_t executable, void* visit_data);

/* Enumerates the host's loaded executables, calling visit(executable, visit_data) for each, and returns
 * HSA_STATUS_SUCCESS after a complete walk, or the first status other than HSA_STATUS_SUCCESS that visit
 * returned (or its own error). It has the shape of hsa_ven_amd_loader_iterate_executables plus a user_data
 * argument, so a host with its own code-object registry can walk that instead. It is called from whichever
 * thread runs kreplay_snap. */
typedef hsa_status_t (*executable_iterator_t)(void* user_data, executable_visitor_t visit, void* visit_data);

/* kreplay's digest op (kreplay_device_ops_t::digest) with the host's own first argument. */
typedef kreplay_status_t (*digest_fn_t)(void* digest_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                                        std::size_t count, std::size_t block_bytes);

typedef struct configure_options_t {
  /* sizeof(configure_options_t) as the caller compiled it. The first three fields are required; later ones
   * are optional (a smaller struct_size leaves them at their defaults). */
  std::size_t struct_size;
  /* The host's executable enumeration; NULL: the AMD loader extension's hsa_ven_amd_loader_iterate_executables,
   * looked up through the core table's hsa_system_get_major_extension_table the first time a snapshot
   * needs it (the runtime must be initialised by then). */
  executable_iterator_t iterate_executables;
  /* Passed back as iterate_executables' first argument. */
  void* iterate_executables_data;
  /* Optional [NULL]: block digests of device memory, for kreplay's dirty-only mode. A digest has to run on
   * the GPU (a kernel in a code object), which this adapter does not ship; a host that has one passes it
   * here and the ops forward to it with digest_data. Its contract is kreplay_device_ops_t::digest's. */
  digest_fn_t digest;
  void* digest_data;
} configure_options_t;

/* Builds a kreplay_device_ops_t from the given tables and installs it with kreplay_configure (see
 * make_device_ops for the ops themselves). Pass the
 * host's captured copies of the tables as the runtime gave them -- not the live tables holding install()'s
 * wrappers, nor other tools' -- so that kreplay's own copies and queries are neither traced nor recorded. The
 * entries are copied out: the tables need not outlive the call. The ops:
 *   copy                      hsa_memory_copy (blocking, any direction);
 *   pointer_info              hsa_amd_pointer_info: type, global flags, agentOwner, agentBaseAddress,
 *                             sizeInBytes. When the runtime returns a pointer-info struct too short to hold
 *                             global_flags (or the headers lack the field), coarse or fine grain is derived
 *                             from the owner's device type through hsa_agent_get_info: memory owned by a GPU
 *                             counts as coarse-grained, memory owned by a CPU as fine-grained;
 *   iterate_module_variables  the executables from options->iterate_executables (or the loader extension),
 *                             each walked with hsa_executable_iterate_agent_symbols for the agent; for every
 *                             variable symbol its address, size, name and segment/constness are read with
 *                             hsa_executable_symbol_get_info. Any failed query fails the whole scan, so the
 *                             snapshot is declined (KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE) rather than taken
 *                             without a variable. Executables with a zero handle (slots of destroyed ones
 *                             that some ROCr versions report) are skipped;
 *   host_lock / host_unlock   hsa_amd_memory_lock with no agent list (ROCr then makes the memory accessible to
 *                             every agent, since kreplay's op names none) and hsa_amd_memory_unlock. Only used
 *                             when the policy asks for pinned staging (kreplay_policy_t::pin_staging). The
 *                             adapter remembers each locked range and its agent pointer, for copy_batch;
 *   copy_batch                hsa_amd_memory_async_copy for every copy between page-locked host memory (locked
 *                             by host_lock above) or device storage (from device_alloc below) and device
 *                             memory of the agent, with up to 32 copies in flight, each with its own completion
 *                             signal from a pool the ops keep (ROCr's SDMA engines without platform atomics
 *                             write a completion value captured at submission, so copies never share a
 *                             signal); every other copy (pageable host memory) with hsa_memory_copy. It
 *                             returns when all are done; a copy refused at submission or completed with a
 *                             negative signal value fails the batch (kreplay then redoes it copy by copy).
 *                             With no completion signal to be had, every copy goes through hsa_memory_copy.
 *                             Offered when the tables hold async copy, the signal entries and agent iteration;
 *   device_alloc / free       hsa_amd_memory_pool_allocate (flags 0) on the agent's global, coarse-grained pool
 *                             that allows runtime allocation, and hsa_amd_memory_pool_free, both from these
 *                             captured tables, so kreplay's own storage never reaches the wrappers or the
 *                             inventory. Access is granted with hsa_amd_agents_allow_access when the agent's
 *                             access to its pool is not allowed by default; a pool it can never access is
 *                             not used. A refused allocation is reported (kreplay then stages on the host);
 *   digest                    options->digest when given, otherwise none (see configure_options_t);
 *   release                   frees the context: the signal pool, the remembered ranges, the copied entries.
 * options may be NULL (all defaults). Returns KREPLAY_STATUS_INVALID_ARGUMENT when a table is NULL or too
 * short, a required entry is NULL, or options->struct_size is too small; KREPLAY_STATUS_OUT_OF_HOST_MEMORY
 * when the adapter's small context cannot be allocated; otherwise what kreplay_configure returns. A later
 * call replaces the ops: kreplay calls the old set's release once nothing uses it any more. */
kreplay_status_t configure(const CoreApiTable* core, const AmdExtTable* amd_ext, const configure_options_t* options);

/* The ops configure() would install, without installing them: for a host that wants to inspect or extend them
 * before its own kreplay_configure. ops_out->user_data is a context that ops_out->release frees, exactly once:
 * kreplay calls it when it drops a set it took -- after a later configure, or at once when the engine refuses
 * the set (FINALIZED, CAPACITY_EXCEEDED); a caller that never passes the ops to kreplay_configure, or whose
 * call returns KREPLAY_STATUS_INVALID_ARGUMENT (refused before kreplay took the set), calls
 * ops_out->release(ops_out->user_data) itself. Errors as configure(), and *ops_out is written only on success. */
kreplay_status_t make_device_ops(const CoreApiTable* core, const AmdExtTable* amd_ext,
                                 const configure_options_t* options, kreplay_device_ops_t* ops_out);

/* ---------------------------------------------------------------------------------------------------------
 * Logging
 * ------------------------------------------------------------------------------------------------------- */

/* Receives one message: length bytes, NUL-terminated, without a trailing newline, valid only during the
 * call. Called from any thread; it must not call back into kreplay. */
typedef void (*log_sink_t)(kreplay_log_level_t level, const char* message, std::size_t length);

/* Routes kreplay's messages and the adapter's own at or below max_level to sink (kreplay_set_logger with
 * forward_log). NULL sink: back to the defaults, ERROR and WARNING lines on stderr. */
void set_log_sink(log_sink_t sink, kreplay_log_level_t max_level);

/* A kreplay_log_fn that delivers to the sink set with set_log_sink (user_data is ignored), or writes ERROR and
 * WARNING to stderr when none is set. set_log_sink installs it; a host that calls kreplay_set_logger itself
 * can pass it directly. */
void forward_log(void* user_data, kreplay_log_level_t level, const char* message, std::size_t length);

/* ---------------------------------------------------------------------------------------------------------
 * Teardown
 * ------------------------------------------------------------------------------------------------------- */

/* Call from the host's finalization, before its static destructors run (rocprofiler-sdk: its fini, where
 * the registration's fini status becomes non-zero). Runs kreplay_finalize, after which the installed wrappers
 * only forward to the runtime: a free arriving from another library's teardown touches no kreplay state.
 * Irreversible. */
void finalize();

}  // namespace kreplay::hsa

#endif  // KREPLAY_HSA_HPP

/* Helpers shared by the unit tests in c-tests/unit: checks that stop the test at the first broken promise
 * (printing file:line, both values and what the library logged), a logger that keeps what the library
 * said so a test can assert on it, and short-hands for the simulated device.
 *
 * Header-only, C99 and C++17. Include it first: it asks for POSIX (pthreads) before any system header. Each
 * test executable is one process and so one library singleton; the tests inside it use distinct agents so
 * that pool and inventory state cannot leak from one test into another. */
#ifndef KREPLAY_TEST_UTIL_H
#define KREPLAY_TEST_UTIL_H

#if !defined(__cplusplus) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kreplay.h"
#if defined(KREPLAY_SIM)
#include "kreplay_sim.h"
#endif

/* ---- Log capture ----------------------------------------------------------------------------------------- */

#define TEST_LOG_MAX_LINES 512
#define TEST_LOG_LINE_BYTES 400

typedef struct test_log_line_t {
  kreplay_log_level_t level;
  char text[TEST_LOG_LINE_BYTES];
} test_log_line_t;

/* The library may log from any thread, so the capture is behind a mutex. Lines past the limit are counted
 * but not kept. */
static pthread_mutex_t test_log_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t test_log_total;
static test_log_line_t test_log_lines[TEST_LOG_MAX_LINES];

static void test_log_sink(void* user_data, kreplay_log_level_t level, const char* message, size_t length) {
  (void)user_data;
  pthread_mutex_lock(&test_log_lock);
  if (test_log_total < TEST_LOG_MAX_LINES) {
    test_log_line_t* line = &test_log_lines[test_log_total];
    size_t kept = length < TEST_LOG_LINE_BYTES - 1 ? length : TEST_LOG_LINE_BYTES - 1;
    line->level = level;
    memcpy(line->text, message, kept);
    line->text[kept] = '\0';
  }
  ++test_log_total;
  pthread_mutex_unlock(&test_log_lock);
}

/* Forgets what was captured so far. */
static inline void test_log_clear(void) {
  pthread_mutex_lock(&test_log_lock);
  test_log_total = 0;
  pthread_mutex_unlock(&test_log_lock);
}

/* Routes the library's messages up to max_level into the capture, starting from an empty one. */
static inline void test_log_capture(kreplay_log_level_t max_level) {
  test_log_clear();
  kreplay_set_logger(test_log_sink, NULL, max_level);
}

/* Back to the library's default logger (warnings and errors to stderr); what was captured is dropped, so a
 * later failure does not print lines that belong to an earlier test. */
static inline void test_log_stop(void) {
  kreplay_set_logger(NULL, NULL, KREPLAY_LOG_WARNING);
  test_log_clear();
}

/* Lines at exactly `level` (any level when `level` is negative) that contain `needle` (any line when NULL). */
static inline size_t test_log_count(int level, const char* needle) {
  size_t found = 0;
  size_t i;
  pthread_mutex_lock(&test_log_lock);
  for (i = 0; i < test_log_total && i < TEST_LOG_MAX_LINES; ++i) {
    if (level >= 0 && (int)test_log_lines[i].level != level) {
      continue;
    }
    if (needle == NULL || strstr(test_log_lines[i].text, needle) != NULL) {
      ++found;
    }
  }
  pthread_mutex_unlock(&test_log_lock);
  return found;
}

static inline void test_log_dump(FILE* out) {
  size_t i;
  pthread_mutex_lock(&test_log_lock);
  for (i = 0; i < test_log_total && i < TEST_LOG_MAX_LINES; ++i) {
    fprintf(out, "  log[%d]: %s\n", (int)test_log_lines[i].level, test_log_lines[i].text);
  }
  if (test_log_total > TEST_LOG_MAX_LINES) {
    fprintf(out, "  ... and %zu more lines\n", test_log_total - TEST_LOG_MAX_LINES);
  }
  pthread_mutex_unlock(&test_log_lock);
}

/* ---- Checks ---------------------------------------------------------------------------------------------- */

static inline void test_fail(const char* file, int line, const char* what) {
  fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
  if (test_log_total > 0) {
    fprintf(stderr, "captured library log:\n");
    test_log_dump(stderr);
  }
  fflush(stderr);
  exit(1);
}

#define CHECK(condition)                              \
  do {                                                \
    if (!(condition)) {                               \
      test_fail(__FILE__, __LINE__, #condition);      \
    }                                                 \
  } while (0)

/* Compares two sizes and prints both: a count that is off by one says more than "false". */
#define CHECK_EQ(expected, actual)                                                                          \
  do {                                                                                                      \
    size_t check_e_ = (size_t)(expected), check_a_ = (size_t)(actual);                                     \
    if (check_e_ != check_a_) {                                                                             \
      fprintf(stderr, "%s:%d: %s == %s: expected %zu, got %zu\n", __FILE__, __LINE__, #expected, #actual,   \
              check_e_, check_a_);                                                                          \
      test_fail(__FILE__, __LINE__, "values differ");                                                       \
    }                                                                                                       \
  } while (0)

#define CHECK_STATUS(expected, call)                                                                      \
  do {                                                                                                    \
    kreplay_status_t check_s_ = (call);                                                                   \
    if (check_s_ != (expected)) {                                                                         \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s)\n", __FILE__, __LINE__, #call,        \
              (int)check_s_, kreplay_status_string(check_s_), (int)(expected),                            \
              kreplay_status_string(expected));                                                           \
      test_fail(__FILE__, __LINE__, "unexpected status");                                                 \
    }                                                                                                     \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(KREPLAY_STATUS_SUCCESS, call)

/* Runs one test function; its name states the behaviour it checks. */
#define RUN_TEST(function)                        \
  do {                                            \
    printf("[ RUN  ] %s\n", #function);           \
    fflush(stdout);                               \
    function();                                   \
    printf("[   OK ] %s\n", #function);           \
    fflush(stdout);                               \
  } while (0)

/* ---- Small values ---------------------------------------------------------------------------------------- */

static inline kreplay_agent_t test_agent(uint64_t handle) {
  kreplay_agent_t agent;
  agent.handle = handle;
  return agent;
}

/* A byte pattern that differs with the seed and along the buffer (so a shifted or partial copy shows). */
static inline unsigned char test_pattern_byte(unsigned seed, size_t i) {
  return (unsigned char)(seed * 131u + (unsigned)i * 7u + (unsigned)(i >> 8) + 1u);
}

static inline void test_fill(void* memory, size_t bytes, unsigned seed) {
  unsigned char* p = (unsigned char*)memory;
  size_t i;
  for (i = 0; i < bytes; ++i) {
    p[i] = test_pattern_byte(seed, i);
  }
}

static inline bool test_has_pattern(const void* memory, size_t bytes, unsigned seed) {
  const unsigned char* p = (const unsigned char*)memory;
  size_t i;
  for (i = 0; i < bytes; ++i) {
    if (p[i] != test_pattern_byte(seed, i)) {
      return false;
    }
  }
  return true;
}

static inline bool test_all_bytes(const void* memory, size_t bytes, unsigned char value) {
  const unsigned char* p = (const unsigned char*)memory;
  size_t i;
  for (i = 0; i < bytes; ++i) {
    if (p[i] != value) {
      return false;
    }
  }
  return true;
}

/* A policy of the current version with every other field zero; a test sets the fields it needs. */
static inline kreplay_policy_t test_policy(void) {
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  return policy;
}

static inline kreplay_host_memory_stats_t test_host_memory(void) {
  kreplay_host_memory_stats_t stats;
  memset(&stats, 0, sizeof stats);
  CHECK_OK(kreplay_host_memory_stats(&stats));
  return stats;
}

static inline kreplay_inventory_stats_t test_inventory(kreplay_agent_t agent) {
  kreplay_inventory_stats_t stats;
  memset(&stats, 0, sizeof stats);
  CHECK_OK(kreplay_inventory_stats(agent, &stats));
  return stats;
}

/* ---- The simulated device -------------------------------------------------------------------------------- */

#if defined(KREPLAY_SIM)

/* The simulated device, set up with `options` first when given, as the library's device, with tracking on.
 * Returns the ops it configured, so a test can check which optional ops the options offered. */
static inline kreplay_device_ops_t test_configure_sim_with(const kreplay_sim_options_t* options) {
  kreplay_device_ops_t ops;
  if (options != NULL) {
    kreplay_sim_set_options(options);
  }
  memset(&ops, 0, sizeof ops);
  CHECK_OK(kreplay_sim_device_ops(&ops));
  CHECK_OK(kreplay_configure(&ops));
  kreplay_tracking_enable(true);
  CHECK(kreplay_tracking_is_enabled());
  return ops;
}

/* The simulated device with batched copies and digests: what dirty-only restores and learned write sets need. */
static inline void test_configure_sim_digesting(void) {
  kreplay_sim_options_t options;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.digest = true;
  (void)test_configure_sim_with(&options);
}

/* The simulated device with its default options. */
static inline void test_configure_sim(void) {
  (void)test_configure_sim_with(NULL);
}

/* Simulated memory of the given kind, recorded as a host's allocate wrapper would. */
static inline void* test_alloc_kind(kreplay_agent_t agent, size_t size, kreplay_pointer_type_t type,
                                    uint32_t global_flags) {
  void* ptr = NULL;
  CHECK_OK(kreplay_sim_alloc(agent, size, type, global_flags, &ptr));
  CHECK(ptr != NULL);
  CHECK_OK(kreplay_record_alloc(ptr, size, 0));
  return ptr;
}

/* Coarse-grained device memory of `agent`, the kind the library tracks, recorded. */
static inline void* test_alloc(kreplay_agent_t agent, size_t size) {
  return test_alloc_kind(agent, size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
}

/* Frees tracked memory as a host's free wrapper would: the record first, then the real free. */
static inline void test_free(void* ptr) {
  CHECK_OK(kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
}

static inline void* test_module_variable(kreplay_agent_t agent, const char* name, size_t size, bool is_constant) {
  void* address = NULL;
  CHECK_OK(kreplay_sim_add_module_variable(agent, name, size, is_constant, &address));
  return address;
}

/* A snapshot of `agent` that must succeed: no decline, a snapshot to free. */
static inline kreplay_snapshot_t* test_snap_ok(kreplay_agent_t agent) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;
  CHECK_OK(kreplay_snap(agent, &snapshot, &reason));
  CHECK(snapshot != NULL);
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  return snapshot;
}

static inline kreplay_sim_counters_t test_counters(void) {
  kreplay_sim_counters_t counters;
  memset(&counters, 0, sizeof counters);
  CHECK_OK(kreplay_sim_counters(&counters));
  return counters;
}

static inline kreplay_sim_faults_t test_no_faults(void) {
  kreplay_sim_faults_t faults;
  memset(&faults, 0, sizeof faults);
  return faults;
}

static inline void test_disarm_faults(void) {
  kreplay_sim_set_faults(NULL);
}

#endif /* KREPLAY_SIM */

#endif /* KREPLAY_TEST_UTIL_H */

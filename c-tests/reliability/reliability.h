/* Helpers shared by the reliability tests: checks that keep going after a failure (so one run lists every
 * broken promise), a logger that records what the library said, byte images of simulated device memory, and
 * the leak check every test ends with. Header-only, usable from C99 and C++17. */
#ifndef KREPLAY_RELIABILITY_H
#define KREPLAY_RELIABILITY_H

#ifndef KREPLAY_SIM
#error "the reliability tests need the simulated device (kreplay_add_test(... SIM ...))"
#endif

#include "kreplay.h"
#include "kreplay_sim.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rel_failures = 0;

#define REL_CHECK(condition)                                                             \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);      \
      ++rel_failures;                                                                    \
    }                                                                                    \
  } while (0)

/* Compares two sizes and prints both on failure: a count that is off by one says more than "false". */
#define REL_CHECK_EQ(actual, expected)                                                                  \
  do {                                                                                                  \
    size_t rel_a_ = (size_t)(actual), rel_e_ = (size_t)(expected);                                      \
    if (rel_a_ != rel_e_) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s == %s (%zu != %zu)\n", __FILE__, __LINE__, #actual,     \
              #expected, rel_a_, rel_e_);                                                               \
      ++rel_failures;                                                                                   \
    }                                                                                                   \
  } while (0)

#define REL_CHECK_STATUS(call, expected)                                                                   \
  do {                                                                                                     \
    kreplay_status_t rel_s_ = (call);                                                                      \
    if (rel_s_ != (expected)) {                                                                            \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s)\n", __FILE__, __LINE__, #call,         \
              (int)rel_s_, kreplay_status_string(rel_s_), (int)(expected), kreplay_status_string(expected)); \
      ++rel_failures;                                                                                      \
    }                                                                                                      \
  } while (0)

/* Fatal: for set-up steps without which the rest of the test means nothing. */
#define REL_REQUIRE(condition)                                                                  \
  do {                                                                                          \
    if (!(condition)) {                                                                         \
      fprintf(stderr, "%s:%d: required condition failed: %s\n", __FILE__, __LINE__, #condition); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

static inline int rel_finish(const char* name) {
  if (rel_failures != 0) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, rel_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* ---- Captured log ------------------------------------------------------------------------------------ */

/* The last messages, enough to find the one a single call produced. Single-threaded tests only: the
 * concurrency test counts messages with its own atomic logger. */
#define REL_LOG_KEEP 64
#define REL_LOG_TEXT 1100

typedef struct rel_log_t {
  size_t total;
  size_t per_level[4];
  size_t invalid_level;
  size_t bad_length;
  char text[REL_LOG_KEEP][REL_LOG_TEXT];
  kreplay_log_level_t level[REL_LOG_KEEP];
} rel_log_t;

static rel_log_t rel_log;

static inline void rel_log_sink(void* user_data, kreplay_log_level_t level, const char* message, size_t length) {
  rel_log_t* log = (rel_log_t*)user_data;
  size_t slot = log->total % REL_LOG_KEEP;
  size_t n = length < REL_LOG_TEXT - 1 ? length : REL_LOG_TEXT - 1;
  /* The library promises `length` bytes followed by a NUL: a mismatch would make a host's strlen run off. */
  if (message == NULL || strlen(message) != length) {
    ++log->bad_length;
  }
  if ((unsigned)level > (unsigned)KREPLAY_LOG_TRACE) {
    ++log->invalid_level;
  } else {
    ++log->per_level[level];
  }
  if (message != NULL) {
    memcpy(log->text[slot], message, n);
  }
  log->text[slot][n] = '\0';
  log->level[slot] = level;
  ++log->total;
}

static inline void rel_log_install(kreplay_log_level_t max_level) {
  memset(&rel_log, 0, sizeof rel_log);
  kreplay_set_logger(rel_log_sink, &rel_log, max_level);
}

/* Messages logged since `mark` (a value of rel_log.total) at `level` or more severe whose text contains
 * `needle`. */
static inline size_t rel_log_count_since(size_t mark, kreplay_log_level_t level, const char* needle) {
  size_t found = 0;
  size_t first = rel_log.total > REL_LOG_KEEP && mark < rel_log.total - REL_LOG_KEEP ? rel_log.total - REL_LOG_KEEP
                                                                                    : mark;
  size_t i;
  for (i = first; i < rel_log.total; ++i) {
    size_t slot = i % REL_LOG_KEEP;
    if ((unsigned)rel_log.level[slot] <= (unsigned)level && strstr(rel_log.text[slot], needle) != NULL) {
      ++found;
    }
  }
  return found;
}

/* Checks that a call logged a line at `level` or more severe containing `needle`; prints what was logged
 * instead when it did not. */
#define REL_CHECK_LOGGED(mark_, level_, needle_)                                                           \
  do {                                                                                                     \
    if (rel_log_count_since((mark_), (level_), (needle_)) == 0) {                                          \
      size_t rel_i_;                                                                                       \
      fprintf(stderr, "%s:%d: no message at level <= %d containing \"%s\" was logged; since the mark:\n",  \
              __FILE__, __LINE__, (int)(level_), (needle_));                                               \
      for (rel_i_ = (mark_); rel_i_ < rel_log.total; ++rel_i_) {                                           \
        fprintf(stderr, "    [%d] %s\n", (int)rel_log.level[rel_i_ % REL_LOG_KEEP],                        \
                rel_log.text[rel_i_ % REL_LOG_KEEP]);                                                      \
      }                                                                                                    \
      ++rel_failures;                                                                                      \
    }                                                                                                      \
  } while (0)

/* ---- Simulated device memory ------------------------------------------------------------------------- */

typedef struct rel_range_t {
  unsigned char* address;
  size_t size;
} rel_range_t;

/* A copy of every byte of `ranges`, to compare device memory before and after a call. */
static inline unsigned char* rel_image_take(const rel_range_t* ranges, size_t count) {
  size_t total = 0, at = 0, i;
  unsigned char* image;
  for (i = 0; i < count; ++i) {
    total += ranges[i].size;
  }
  image = (unsigned char*)malloc(total > 0 ? total : 1);
  REL_REQUIRE(image != NULL);
  for (i = 0; i < count; ++i) {
    memcpy(image + at, ranges[i].address, ranges[i].size);
    at += ranges[i].size;
  }
  return image;
}

/* Index of the first range whose bytes differ from `image`, or `count` when all match. */
static inline size_t rel_image_first_difference(const rel_range_t* ranges, size_t count, const unsigned char* image) {
  size_t at = 0, i;
  for (i = 0; i < count; ++i) {
    if (memcmp(ranges[i].address, image + at, ranges[i].size) != 0) {
      return i;
    }
    at += ranges[i].size;
  }
  return count;
}

static inline size_t rel_image_differences(const rel_range_t* ranges, size_t count, const unsigned char* image) {
  size_t at = 0, i, differing = 0;
  for (i = 0; i < count; ++i) {
    if (memcmp(ranges[i].address, image + at, ranges[i].size) != 0) {
      ++differing;
    }
    at += ranges[i].size;
  }
  return differing;
}

/* Fills every range with bytes that depend on `seed`, the range and the offset, so that a range written back
 * into the wrong place, or half written, is told apart from the right one. */
static inline void rel_fill(const rel_range_t* ranges, size_t count, unsigned seed) {
  size_t i, j;
  for (i = 0; i < count; ++i) {
    for (j = 0; j < ranges[i].size; ++j) {
      ranges[i].address[j] = (unsigned char)(seed * 131u + i * 31u + j * 7u + (j >> 8));
    }
  }
}

static inline kreplay_sim_counters_t rel_counters(void) {
  kreplay_sim_counters_t counters;
  memset(&counters, 0, sizeof counters);
  REL_REQUIRE(kreplay_sim_counters(&counters) == KREPLAY_STATUS_SUCCESS);
  return counters;
}

static inline kreplay_host_memory_stats_t rel_host_memory(void) {
  kreplay_host_memory_stats_t stats;
  memset(&stats, 0, sizeof stats);
  REL_REQUIRE(kreplay_host_memory_stats(&stats) == KREPLAY_STATUS_SUCCESS);
  return stats;
}

static inline void rel_configure_sim(void) {
  kreplay_device_ops_t ops;
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  REL_REQUIRE(kreplay_configure(&ops) == KREPLAY_STATUS_SUCCESS);
}

/* ---- Leak check -------------------------------------------------------------------------------------- */

/* After every snapshot is freed and every buffer released: trims the agents' pools, then checks that the
 * library's host mappings are back to `start` (bytes, and as many unmaps as maps since), and that the device
 * saw as many unlocks as locks, nothing left locked and no write into freed memory. */
#define REL_CHECK_NO_LEAKS(start, agents, agent_count)                                                     \
  do {                                                                                                     \
    kreplay_host_memory_stats_t rel_now_;                                                                  \
    kreplay_sim_counters_t rel_c_;                                                                         \
    size_t rel_k_;                                                                                         \
    for (rel_k_ = 0; rel_k_ < (agent_count); ++rel_k_) {                                                   \
      kreplay_staging_trim((agents)[rel_k_]);                                                              \
      REL_CHECK_EQ(kreplay_retained_staging_bytes((agents)[rel_k_]), 0);                                   \
    }                                                                                                      \
    rel_now_ = rel_host_memory();                                                                          \
    rel_c_ = rel_counters();                                                                               \
    REL_CHECK_EQ(rel_now_.mapped_bytes, (start).mapped_bytes);                                             \
    REL_CHECK_EQ(rel_now_.maps - (start).maps, rel_now_.unmaps - (start).unmaps);                          \
    REL_CHECK_EQ(rel_c_.host_locks, rel_c_.host_unlocks);                                                  \
    REL_CHECK_EQ(rel_c_.locked_bytes, 0);                                                                  \
    REL_CHECK_EQ(rel_c_.violations, 0);                                                                    \
  } while (0)

#endif /* KREPLAY_RELIABILITY_H */

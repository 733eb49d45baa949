/* Fixed-capacity tables driven past their limits, and allocations the inventory could not record. API.md: an
 * allocation that could not be recorded is never lost silently; while it may be live, snapshots that could
 * miss it are declined (INVENTORY_OVERFLOW, with a warning naming the capacity setting), and once it is gone
 * they are whole again. Every other table says CAPACITY_EXCEEDED (or declines) and maps nothing it keeps. */
#include "reliability.h"

#include <stdbool.h>

static const kreplay_agent_t agent = {0xC1};
static const kreplay_agent_t other_agent = {0xC2};

static void* sim_region(kreplay_agent_t owner, size_t size) {
  void* region = NULL;
  REL_REQUIRE(kreplay_sim_alloc(owner, size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);
  return region;
}

static kreplay_status_t snap_and_free(kreplay_agent_t who, kreplay_decline_reason_t* reason) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_status_t status = kreplay_snap(who, &snapshot, reason);
  kreplay_snapshot_free(snapshot);
  return status;
}

static kreplay_inventory_stats_t stats_of(kreplay_agent_t who) {
  kreplay_inventory_stats_t stats;
  memset(&stats, 0, sizeof stats);
  REL_CHECK_STATUS(kreplay_inventory_stats(who, &stats), KREPLAY_STATUS_SUCCESS);
  return stats;
}

/* Tracking turned on before the ops are installed (a host that enables it at load and configures once the
 * runtime's tables arrive): record_alloc cannot classify the allocation, so it could not be recorded. */
static void alloc_recorded_before_configure_is_not_lost(void) {
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  void* region = sim_region(agent, 256);
  kreplay_tracking_enable(true);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 256, 0), KREPLAY_STATUS_NOT_CONFIGURED);
  rel_configure_sim();
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  /* Its free is what makes snapshots whole again. */
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  /* Whatever happened above, start the rest from an empty inventory. */
  kreplay_tracking_enable(false);
  kreplay_tracking_enable(true);
}

/* A retried record_alloc after its pointer query failed: the allocation is tracked now, so the mark the
 * failed attempt left must not keep declining every agent, and one free takes it out entirely. */
static void retried_record_alloc_clears_the_lost_mark(void) {
  kreplay_sim_faults_t faults;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  void* region = sim_region(agent, 256);
  memset(&faults, 0, sizeof faults);
  faults.fail_pointer_info = true;
  kreplay_sim_set_faults(&faults);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 256, 0), KREPLAY_STATUS_DEVICE_ERROR);
  kreplay_sim_set_faults(NULL);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 256, 0), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats_of(agent).regions, 1);
  REL_CHECK_EQ(stats_of(agent).overflowed, 0);
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats_of(other_agent).overflowed, 0);
  REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(false);
  kreplay_tracking_enable(true);
}

/* The allocation table full: the next allocation is CAPACITY_EXCEEDED, its agent (and only its agent) is
 * declined with a warning naming the setting, and freeing it ends that. */
static void allocation_table_full(void) {
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  const size_t capacity = stats_of(agent).capacity;
  unsigned char** regions;
  unsigned char* extra;
  size_t i, mark;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_snapshot_info_t info;

  if (capacity > ((size_t)1 << 20)) {
    printf("allocation table of %zu entries: too large to fill here, skipped\n", capacity);
    return;
  }
  regions = (unsigned char**)calloc(capacity, sizeof *regions);
  REL_REQUIRE(regions != NULL);
  for (i = 0; i < capacity; ++i) {
    regions[i] = (unsigned char*)sim_region(agent, 16);
    regions[i][0] = (unsigned char)i;
    REL_CHECK_STATUS(kreplay_record_alloc(regions[i], 16, 0), KREPLAY_STATUS_SUCCESS);
  }
  REL_CHECK_EQ(stats_of(agent).regions, capacity);
  extra = (unsigned char*)sim_region(agent, 16);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_alloc(extra, 16, 0), KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "KREPLAY_MAX_TRACKED_REGIONS");
  REL_CHECK_EQ(stats_of(agent).overflowed, 1);
  REL_CHECK_EQ(stats_of(other_agent).overflowed, 0);
  mark = rel_log.total;
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "KREPLAY_MAX_TRACKED_REGIONS");
  REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_SUCCESS);

  /* The lost allocation is freed: a full table snapshots completely again. */
  REL_CHECK_STATUS(kreplay_record_free(extra), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats_of(agent).overflowed, 0);
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, &reason), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_snapshot_info(snapshot, &info), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(info.regions, capacity);
  for (i = 0; i < capacity; ++i) {
    regions[i][0] = 0xEE;
  }
  REL_CHECK_STATUS(kreplay_restore(snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  for (i = 0; i < capacity; ++i) {
    if (regions[i][0] != (unsigned char)i) {
      REL_CHECK(regions[i][0] == (unsigned char)i);
      break;
    }
  }
  kreplay_snapshot_free(snapshot);

  for (i = 0; i < capacity; ++i) {
    REL_CHECK_STATUS(kreplay_record_free(regions[i]), KREPLAY_STATUS_SUCCESS);
    kreplay_sim_free(regions[i]);
  }
  kreplay_sim_free(extra);
  REL_CHECK_EQ(stats_of(agent).regions, 0);
  free(regions);
}

/* The mapping table full. A mapping that could not be tracked, and the tail of a split that could not be
 * stored, are declined for their agent until they are unmapped; the unmap must end that. */
static void vmem_table_full(void) {
  enum { SLICE = 256 };
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  size_t mappings = 0, i, mark;
  unsigned char* base;
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  const size_t room = 8192; /* more slices than the table can hold */

  base = (unsigned char*)sim_region(agent, room * SLICE);
  for (i = 0; i < room; ++i) {
    mark = rel_log.total;
    status = kreplay_record_vmem_map(base + i * SLICE, SLICE, agent);
    if (status != KREPLAY_STATUS_SUCCESS) {
      break;
    }
    ++mappings;
  }
  REL_CHECK_STATUS(status, KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "cannot be tracked");
  printf("mapping table: %zu mappings tracked before CAPACITY_EXCEEDED\n", mappings);
  REL_CHECK_EQ(stats_of(agent).regions, mappings);
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_SUCCESS);

  /* The host unmaps the mapping that could not be tracked. */
  kreplay_record_vmem_unmap(base + mappings * SLICE, SLICE);
  REL_CHECK_EQ(stats_of(agent).overflowed, 0);
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_SUCCESS);

  /* Unmapping the middle of a mapping splits it; with the table full the tail cannot be stored. */
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(base + 64, 64), KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "split");
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  /* The host unmaps the rest of that mapping, tail included. */
  kreplay_record_vmem_unmap(base, SLICE);
  REL_CHECK_EQ(stats_of(agent).overflowed, 0);
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_SUCCESS);

  /* A mapping whose owner is unknown declines every agent until unmaps cover it: its head, then the rest. */
  {
    unsigned char* unknown = base + (room - 8) * SLICE;
    mark = rel_log.total;
    REL_CHECK_STATUS(kreplay_record_vmem_map_unknown_owner(unknown, 4 * SLICE), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "no known owner");
    REL_CHECK_EQ(stats_of(other_agent).overflowed, 1);
    REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_DECLINED);
    REL_CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
    REL_CHECK_STATUS(kreplay_record_vmem_unmap(unknown, SLICE), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_DECLINED);
    REL_CHECK_STATUS(kreplay_record_vmem_unmap(unknown + SLICE, 3 * SLICE), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(stats_of(other_agent).overflowed, 0);
    REL_CHECK_STATUS(snap_and_free(other_agent, &reason), KREPLAY_STATUS_SUCCESS);
  }

  /* One unmap covering everything. */
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(base, room * SLICE), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats_of(agent).regions, 0);
  kreplay_sim_free(base);
  kreplay_tracking_enable(false);
  kreplay_tracking_enable(true);
}

/* More live snapshots than the handle registry holds: the next is declined (METADATA_MEMORY) and leaves
 * nothing behind; freeing one makes room. */
static void live_snapshot_limit(void) {
  enum { MOST = 4096 };
  kreplay_snapshot_t** snapshots = (kreplay_snapshot_t**)calloc(MOST, sizeof *snapshots);
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  size_t live = 0, i, mark = 0;
  const kreplay_agent_t empty = {0xC3};
  REL_REQUIRE(snapshots != NULL);
  for (i = 0; i < MOST; ++i) {
    mark = rel_log.total;
    status = kreplay_snap(empty, &snapshots[i], &reason);
    if (status != KREPLAY_STATUS_SUCCESS) {
      break;
    }
    ++live;
  }
  printf("live snapshots: %zu before the registry was full\n", live);
  REL_CHECK(live < MOST);
  REL_CHECK_STATUS(status, KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_METADATA_MEMORY && snapshots[live] == NULL);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "free some");
  kreplay_snapshot_free(snapshots[0]);
  REL_CHECK_STATUS(kreplay_snap(empty, &snapshots[0], &reason), KREPLAY_STATUS_SUCCESS);
  for (i = 0; i < live; ++i) {
    kreplay_snapshot_free(snapshots[i]);
  }
  free(snapshots);
}

/* One agent's pool tracks a fixed number of page-backed blocks: one more is CAPACITY_EXCEEDED and its mapping
 * is given back at once; a snapshot needing staging then declines (STAGING_MEMORY). Tiny requests past the
 * slab chunks fall back to blocks. */
static void staging_pool_limits(void) {
  enum { MOST = 4096, TINY = 40000 };
  kreplay_staging_buffer_t* buffers = (kreplay_staging_buffer_t*)calloc(MOST > TINY ? MOST : TINY, sizeof *buffers);
  kreplay_host_memory_stats_t before;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  size_t held = 0, i, mark = 0, from_blocks = 0;
  const kreplay_agent_t pool_agent = {0xC4};
  void* region = sim_region(pool_agent, 64);
  REL_REQUIRE(buffers != NULL);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 64, 0), KREPLAY_STATUS_SUCCESS);

  for (i = 0; i < MOST; ++i) {
    mark = rel_log.total;
    before = rel_host_memory();
    status = kreplay_staging_acquire(&buffers[i], pool_agent, 4096);
    if (status != KREPLAY_STATUS_SUCCESS) {
      break;
    }
    ++held;
  }
  printf("staging pool: %zu blocks held before the pool was full\n", held);
  REL_CHECK(held < MOST);
  REL_CHECK_STATUS(status, KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK(buffers[held].data == NULL);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "blocks");
  REL_CHECK_EQ(rel_host_memory().mapped_bytes, before.mapped_bytes);
  REL_CHECK_STATUS(snap_and_free(pool_agent, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_STAGING_MEMORY);
  for (i = 0; i < held; ++i) {
    kreplay_staging_release(&buffers[i]);
  }
  kreplay_staging_trim(pool_agent);
  REL_CHECK_STATUS(snap_and_free(pool_agent, &reason), KREPLAY_STATUS_SUCCESS);

  /* Tiny requests: slab slots first, then (slabs full) page-backed blocks, then CAPACITY_EXCEEDED. */
  for (held = 0; held < TINY; ++held) {
    status = kreplay_staging_acquire(&buffers[held], pool_agent, 16);
    if (status != KREPLAY_STATUS_SUCCESS) {
      break;
    }
    REL_CHECK(buffers[held].capacity >= 16);
    if (buffers[held].capacity > 16) {
      ++from_blocks;
    }
    memset(buffers[held].data, 0x3C, 16);
  }
  printf("staging pool: %zu tiny buffers held, %zu of them in blocks once the slabs were full\n", held, from_blocks);
  REL_CHECK(held < TINY);
  REL_CHECK_STATUS(status, KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK(from_blocks > 0);
  for (i = 0; i < held; ++i) {
    kreplay_staging_release(&buffers[i]);
  }
  kreplay_staging_trim(pool_agent);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  kreplay_sim_free(region);
  free(buffers);
}

/* Staging pools exist for a fixed number of agents at once; a pool that holds nothing gives its slot to the next
 * agent. While every slot holds storage, the agent past the limit gets CAPACITY_EXCEEDED for staging and declined
 * snapshots, with an error, and nothing breaks; once storage is given back, it gets a pool. */
static void agent_pool_limit(void) {
  enum { MOST = 512 };
  static kreplay_staging_buffer_t held[MOST];
  kreplay_staging_buffer_t buffer;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  size_t agents = 0, i, mark = 0;
  kreplay_agent_t late = {0};
  void* region;
  /* Agents that come and go never use the pools up: an empty pool gives its slot to the next agent. */
  for (i = 0; i < MOST; ++i) {
    kreplay_agent_t who;
    who.handle = 0xC000 + i;
    memset(&buffer, 0, sizeof buffer);
    REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, who, 64), KREPLAY_STATUS_SUCCESS);
    kreplay_staging_release(&buffer);
    kreplay_staging_trim(who);
  }
  /* Agents that all hold storage at once do: the first one past the table gets CAPACITY_EXCEEDED. */
  memset(held, 0, sizeof held);
  for (i = 0; i < MOST; ++i) {
    kreplay_agent_t who;
    who.handle = 0xD000 + i;
    mark = rel_log.total;
    status = kreplay_staging_acquire(&held[i], who, 64);
    if (status != KREPLAY_STATUS_SUCCESS) {
      late = who;
      break;
    }
    ++agents;
  }
  printf("staging pools: %zu agents held storage at once before the limit\n", agents);
  REL_CHECK(agents < MOST);
  REL_CHECK_STATUS(status, KREPLAY_STATUS_CAPACITY_EXCEEDED);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "no pool slot left");
  region = sim_region(late, 64);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 64, 0), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(snap_and_free(late, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_STAGING_MEMORY);
  /* Once they let go, the late agent gets a pool. */
  for (i = 0; i < agents; ++i) {
    kreplay_agent_t who = held[i].agent;
    kreplay_staging_release(&held[i]);
    kreplay_staging_trim(who);
  }
  REL_CHECK_STATUS(snap_and_free(late, &reason), KREPLAY_STATUS_SUCCESS);
  kreplay_staging_trim(late);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  kreplay_sim_free(region);
  /* Agents that had a pool still work. */
  REL_CHECK_STATUS(snap_and_free(agent, &reason), KREPLAY_STATUS_SUCCESS);
}

int main(void) {
  kreplay_agent_t agents[2];
  kreplay_host_memory_stats_t start;
  agents[0] = agent;
  agents[1] = other_agent;
  kreplay_sim_reset();
  rel_log_install(KREPLAY_LOG_WARNING);
  start = rel_host_memory();

  alloc_recorded_before_configure_is_not_lost();
  retried_record_alloc_clears_the_lost_mark();
  allocation_table_full();
  vmem_table_full();
  live_snapshot_limit();
  staging_pool_limits();
  REL_CHECK_NO_LEAKS(start, agents, 2);
  agent_pool_limit();

  REL_CHECK_EQ(rel_log.bad_length, 0);
  return rel_finish("kreplay_reliability_capacity");
}

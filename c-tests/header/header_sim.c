/* kreplay_sim.h (the simulated device of kreplay::sim) must be strict C99, self-contained (it brings in
 * kreplay.h itself), safe to include twice and after kreplay.h, and must declare every version-2 knob. */
#include "kreplay_sim.h"
#include "kreplay.h"
#include "kreplay_sim.h"

int main(void) {
  kreplay_device_ops_t ops = {0};
  kreplay_sim_counters_t counters = {0};
  kreplay_sim_options_t options = {0};
  kreplay_sim_faults_t faults = {0};
  options.copy_batch = true;
  options.device_alloc = true;
  options.digest = true;
  options.device_capacity = 1u << 20;
  kreplay_sim_set_options(&options);
  if (kreplay_sim_device_ops(&ops) != KREPLAY_STATUS_SUCCESS || ops.copy == NULL || ops.copy_batch == NULL ||
      ops.device_alloc == NULL || ops.device_free == NULL || ops.digest == NULL) {
    return 1;
  }
  faults.fail_device_alloc_at = 1;
  kreplay_sim_set_faults(&faults);
  kreplay_sim_set_faults(NULL);
  kreplay_sim_reset();
  if (kreplay_sim_device_ops(&ops) != KREPLAY_STATUS_SUCCESS || ops.copy_batch != NULL) {
    return 1;
  }
  if (kreplay_sim_counters(&counters) != KREPLAY_STATUS_SUCCESS) {
    return 1;
  }
  return counters.violations == 0 && counters.batches == 0 && kreplay_sim_device_bytes((kreplay_agent_t){1}) == 0
             ? 0
             : 1;
}

/* With KREPLAY_SIM=1 (kreplay::sim) the header also declares the simulated device; that part must be strict
 * C99 and self-contained as well. */
#include "kreplay.h"

int main(void) {
  kreplay_device_ops_t ops = {0};
  kreplay_sim_counters_t counters = {0};
  if (kreplay_sim_device_ops(&ops) != KREPLAY_STATUS_SUCCESS || ops.copy == NULL) {
    return 1;
  }
  if (kreplay_sim_counters(&counters) != KREPLAY_STATUS_SUCCESS) {
    return 1;
  }
  return counters.violations == 0 ? 0 : 1;
}

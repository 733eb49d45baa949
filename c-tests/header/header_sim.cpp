// kreplay_sim.h (the simulated device of kreplay::sim) must compile cleanly as C++17 and stand alone.
#include "kreplay_sim.h"

int main() {
  kreplay_device_ops_t ops = {};
  kreplay_sim_counters_t counters = {};
  kreplay_sim_options_t options = {};
  options.digest = true;
  kreplay_sim_set_options(&options);
  if (kreplay_sim_device_ops(&ops) != KREPLAY_STATUS_SUCCESS || ops.copy == nullptr || ops.digest == nullptr) {
    return 1;
  }
  kreplay_sim_set_options(nullptr);
  if (kreplay_sim_counters(&counters) != KREPLAY_STATUS_SUCCESS) {
    return 1;
  }
  return counters.violations == 0 ? 0 : 1;
}

// With KREPLAY_SIM=1 (kreplay::sim) the header also declares the simulated device; that part must compile
// cleanly as C++17 and stand alone as well.
#include "kreplay.h"

int main() {
  kreplay_device_ops_t ops = {};
  kreplay_sim_counters_t counters = {};
  if (kreplay_sim_device_ops(&ops) != KREPLAY_STATUS_SUCCESS || ops.copy == nullptr) {
    return 1;
  }
  if (kreplay_sim_counters(&counters) != KREPLAY_STATUS_SUCCESS) {
    return 1;
  }
  return counters.violations == 0 ? 0 : 1;
}

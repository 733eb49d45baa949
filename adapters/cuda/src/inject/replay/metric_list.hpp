// --list-metrics: the metrics CUPTI's profiler host knows for a device's chip, by type, with their units and
// descriptions, and the endings (rollups and submetrics) a name takes to be counted (metric_list.cpp).
#ifndef KREPLAY_CUDA_INJECT_REPLAY_METRIC_LIST_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_METRIC_LIST_HPP

#include <string>

#include "replay/range_profiler.hpp"

namespace kreplay::cuda::inject {

// The listing for `device` (its chip name from CUPTI), one metric a line:
//   "counter     dram__bytes_read  byte  <description>"
// after a header naming the chip and each type's endings. False, with why, when CUPTI cannot list (a CUPTI
// without the host listing calls, or a failing call).
bool list_metrics(const range_profiler_api_t& api, int device, std::string* text, std::string* why);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_METRIC_LIST_HPP

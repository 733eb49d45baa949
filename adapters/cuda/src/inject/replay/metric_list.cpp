// --list-metrics (metric_list.hpp): CUPTI's profiler host object for the device's chip, asked for its base
// metrics of each type, one ending list per type, and each metric's unit and description.
#include "replay/metric_list.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace kreplay::cuda::inject {
namespace {

const char* type_name(CUpti_MetricType type) {
  switch (type) {
    case CUPTI_METRIC_TYPE_COUNTER: return "counter";
    case CUPTI_METRIC_TYPE_RATIO: return "ratio";
    default: return "throughput";
  }
}

// The host object of one chip (null when CUPTI refused it), released when the listing ends.
class host_object {
 public:
  host_object(const range_profiler_api_t& api, const char* chip, std::string* why)
      : api_(api), object_(open_host_object(api, chip, why)) {}
  ~host_object() { close_host_object(api_, object_); }
  host_object(const host_object&) = delete;
  host_object& operator=(const host_object&) = delete;

  CUpti_Profiler_Host_Object* get() const { return object_; }

 private:
  const range_profiler_api_t& api_;
  CUpti_Profiler_Host_Object* object_;
};

// One type's lines: the endings its first metric takes (the same for every metric of the type), then a line per
// metric, sorted by name.
bool list_type(const range_profiler_api_t& api, CUpti_Profiler_Host_Object* host, CUpti_MetricType type,
               std::string* header, std::string* lines, std::string* why) {
  CUpti_Profiler_Host_GetBaseMetrics_Params base{};
  base.structSize = CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE;
  base.pHostObject = host;
  base.metricType = type;
  if (!cupti_succeeded(api, api.host_get_base_metrics(&base), "cuptiProfilerHostGetBaseMetrics", why)) {
    return false;
  }
  std::vector<std::string> names(base.ppMetricNames, base.ppMetricNames + base.numMetrics);
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return true;
  }
  CUpti_Profiler_Host_GetSubMetrics_Params sub{};
  sub.structSize = CUpti_Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE;
  sub.pHostObject = host;
  sub.metricType = type;
  sub.pMetricName = names.front().c_str();
  if (!cupti_succeeded(api, api.host_get_sub_metrics(&sub), "cuptiProfilerHostGetSubMetrics", why)) {
    return false;
  }
  *header += std::string("# ") + type_name(type) + " (" + std::to_string(names.size()) + "), a name ends in one of:";
  for (size_t i = 0; i < sub.numOfSubmetrics; ++i) {
    *header += std::string(" ") + sub.ppSubMetrics[i];
  }
  *header += "\n";
  for (const std::string& name : names) {
    CUpti_Profiler_Host_GetMetricProperties_Params properties{};
    // Up to the metric's type, as CUPTI 13.0 has it: the collection scope after it arrived later.
    properties.structSize = CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_GetMetricProperties_Params, metricType);
    properties.pHostObject = host;
    properties.pMetricName = name.c_str();
    const bool known = api.host_get_metric_properties(&properties) == CUPTI_SUCCESS;
    char line[160];
    std::snprintf(line, sizeof(line), "%-11s %-60s %-10s ", type_name(type), name.c_str(),
                  known && properties.pDimUnit != nullptr ? properties.pDimUnit : "");
    *lines += line;
    *lines += (known && properties.pDescription != nullptr ? properties.pDescription : "");
    *lines += "\n";
  }
  return true;
}

}  // namespace

bool list_metrics(const range_profiler_api_t& api, int device, std::string* text, std::string* why) {
  if (api.host_get_base_metrics == nullptr || api.host_get_sub_metrics == nullptr ||
      api.host_get_metric_properties == nullptr) {
    *why = "this CUPTI cannot list metrics (no cuptiProfilerHostGetBaseMetrics, GetSubMetrics or "
           "GetMetricProperties)";
    return false;
  }
  CUpti_Profiler_Initialize_Params init{};
  init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
  if (!cupti_succeeded(api, api.profiler_initialize(&init), "cuptiProfilerInitialize", why)) {
    return false;
  }
  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip.deviceIndex = static_cast<size_t>(device);
  if (!cupti_succeeded(api, api.device_get_chip_name(&chip), "cuptiDeviceGetChipName", why)) {
    return false;
  }
  host_object host(api, chip.pChipName, why);
  if (host.get() == nullptr) {
    return false;
  }
  std::string header = "# the metrics of " + std::string(chip.pChipName) + " (device " + std::to_string(device) +
                       "), for --metrics: a base name below with one of its type's endings\n";
  std::string lines;
  for (CUpti_MetricType type : {CUPTI_METRIC_TYPE_COUNTER, CUPTI_METRIC_TYPE_RATIO, CUPTI_METRIC_TYPE_THROUGHPUT}) {
    if (!list_type(api, host.get(), type, &header, &lines, why)) {
      return false;
    }
  }
  char columns[160];
  std::snprintf(columns, sizeof(columns), "%-11s %-60s %-10s %s\n", "# type", "name", "unit", "description");
  *text = header + columns + lines;
  return true;
}

}  // namespace kreplay::cuda::inject

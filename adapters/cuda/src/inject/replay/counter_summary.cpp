#include "replay/counter_summary.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace kreplay::cuda::inject {
namespace {

constexpr const char* time_metric = "gpu__time_duration.sum";  // nanoseconds
constexpr size_t shown_metrics = 3;

// A value in at most 4 significant digits with a k, M or G suffix, whatever the program's locale for the digits
// (integers only).
std::string compact(double value) {
  const char* suffix = "";
  double scaled = value;
  for (const char* s : {"k", "M", "G"}) {
    if (std::fabs(scaled) < 10000) {
      break;
    }
    scaled /= 1000;
    suffix = s;
  }
  const long long hundredths = std::llround(scaled * 100);
  const unsigned long long magnitude = static_cast<unsigned long long>(hundredths < 0 ? -hundredths : hundredths);
  char text[48];
  if (magnitude % 100 == 0 || std::fabs(scaled) >= 100) {
    std::snprintf(text, sizeof(text), "%s%llu%s", hundredths < 0 ? "-" : "", (magnitude + 50) / 100, suffix);
  } else {
    std::snprintf(text, sizeof(text), "%s%llu.%02llu%s", hundredths < 0 ? "-" : "", magnitude / 100,
                  magnitude % 100, suffix);
  }
  return text;
}

}  // namespace

std::string readable_kernel_name(const std::string& name, size_t width) {
  int status = -1;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  std::string text = status == 0 && demangled != nullptr ? std::string(demangled.get()) : name;
  // "void ns::kernel<...>(args)": the return type and the parameter list go.
  if (text.rfind("void ", 0) == 0) {
    text.erase(0, 5);
  }
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    depth += text[i] == '<' ? 1 : text[i] == '>' ? -1 : 0;
    if (text[i] == '(' && depth == 0) {
      text.resize(i);
      break;
    }
  }
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

counter_summary::counter_summary(std::vector<std::string> metrics) : metrics_(std::move(metrics)) {
  time_ = static_cast<size_t>(std::find(metrics_.begin(), metrics_.end(), time_metric) - metrics_.begin());
  for (size_t i = 0; i < metrics_.size() && shown_.size() < shown_metrics; ++i) {
    if (i != time_) {
      shown_.push_back(i);
    }
  }
}

void counter_summary::add(const launch_row_t& row) {
  if (row.metrics.size() != metrics_.size() || metrics_.empty()) {
    return;
  }
  kernel_t& kernel = kernels_[row.kernel];
  kernel.sums.resize(metrics_.size());
  kernel.counted.resize(metrics_.size());
  ++kernel.launches;
  const bool timed = time_ < metrics_.size() && !std::isnan(row.metrics[time_]);
  kernel.ms += timed ? row.metrics[time_] / 1e6 : row.kernel_ms;
  for (size_t i = 0; i < metrics_.size(); ++i) {
    if (!std::isnan(row.metrics[i])) {
      kernel.sums[i] += row.metrics[i];
      ++kernel.counted[i];
    }
  }
}

std::string counter_summary::text(size_t kernels) const {
  std::vector<std::pair<double, const std::string*>> order;
  double total_ms = 0;
  for (const auto& [name, kernel] : kernels_) {
    order.emplace_back(kernel.ms, &name);
    total_ms += kernel.ms;
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  const char* basis = time_ < metrics_.size() ? time_metric : "kernel_ms (profiled)";
  char line[160];
  std::snprintf(line, sizeof(line),
                "kreplay-cuda-replay: counters: the %zu kernels with the most time (%s), of %zu; means per launch\n",
                std::min(kernels, order.size()), basis, order.size());
  out += order.empty() ? std::string() : std::string(line);
  for (size_t k = 0; k < order.size() && k < kernels; ++k) {
    const kernel_t& kernel = kernels_.at(*order[k].second);
    std::snprintf(line, sizeof(line), "kreplay-cuda-replay:   %s %%  %s ms  x%llu  ",
                  compact(total_ms > 0 ? 100.0 * kernel.ms / total_ms : 0.0).c_str(), compact(kernel.ms).c_str(),
                  static_cast<unsigned long long>(kernel.launches));
    out += line + readable_kernel_name(*order[k].second, 60);
    for (size_t i : shown_) {
      out += "  " + metrics_[i] + " " +
             (kernel.counted[i] > 0 ? compact(kernel.sums[i] / static_cast<double>(kernel.counted[i])) : "-");
    }
    out += "\n";
  }
  return out;
}

}  // namespace kreplay::cuda::inject

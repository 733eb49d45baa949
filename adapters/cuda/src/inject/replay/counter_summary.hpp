// The readable end of a counted replay (--set, --metrics): the kernels that took the most time, each with its
// launches and the means of a few of its metrics, written by the report after its totals. The CSV holds every
// value; this is what a person reads first.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_COUNTER_SUMMARY_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_COUNTER_SUMMARY_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "replay/report.hpp"

namespace kreplay::cuda::inject {

class counter_summary {
 public:
  // `metrics`: the report's columns. Time is gpu__time_duration.sum where the list has it (the kernel's own
  // duration on counted passes), else the row's kernel_ms; the metrics shown are the first three others.
  explicit counter_summary(std::vector<std::string> metrics);
  // A row with values; others are ignored.
  void add(const launch_row_t& row);
  // Up to `kernels` lines, the most time first, each starting with "kreplay-cuda-replay:   "; empty without
  // counted rows.
  std::string text(size_t kernels) const;

 private:
  struct kernel_t {
    uint64_t launches = 0;
    double ms = 0;
    std::vector<double> sums;       // per metric, over the launches that have a value
    std::vector<uint64_t> counted;  // per metric
  };
  std::vector<std::string> metrics_;
  size_t time_;                // index of gpu__time_duration.sum, or metrics_.size()
  std::vector<size_t> shown_;  // indices of the metrics shown
  std::map<std::string, kernel_t> kernels_;  // by the launch's kernel name
};

// `name` demangled where it is a C++ name, without its parameter list, at most `width` characters.
std::string readable_kernel_name(const std::string& name, size_t width);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_COUNTER_SUMMARY_HPP

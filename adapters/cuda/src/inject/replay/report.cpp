#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "log.hpp"
#include "replay/counter_summary.hpp"

namespace kreplay::cuda::inject {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  }
  return out + "\"";
}

// Milliseconds with four decimals, written with integers: "%.4f" follows the program's LC_NUMERIC, and a
// decimal comma would break the CSV.
std::string fixed4(double ms) {
  const long long tenths_of_us = std::llround(ms * 1e4);
  const unsigned long long magnitude = static_cast<unsigned long long>(tenths_of_us < 0 ? -tenths_of_us : tenths_of_us);
  char text[48];
  std::snprintf(text, sizeof(text), "%s%llu.%04llu", tenths_of_us < 0 ? "-" : "", magnitude / 10000, magnitude % 10000);
  return text;
}

// A metric's value, as short as reads back exactly, whatever the program's locale; empty for NaN (a metric the
// device does not have).
std::string shortest(double value) {
  if (std::isnan(value)) {
    return std::string();
  }
  char text[32];
  const std::to_chars_result written = std::to_chars(text, text + sizeof(text), value);
  return written.ec == std::errc() ? std::string(text, written.ptr) : std::string();
}

// An index, or an empty cell for none (-1).
std::string index_or_empty(int64_t index) { return index < 0 ? std::string() : std::to_string(index); }

}  // namespace

double ms_between(replay_clock::time_point a, replay_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void phase_marks::start(replay_clock::time_point begun) {
  on_ = log_enabled(KREPLAY_LOG_INFO);
  last_ = begun;
}

void phase_marks::mark(const char* phase) {
  if (!on_) {
    return;
  }
  const auto now = replay_clock::now();
  phases_.emplace_back(phase, ms_between(last_, now));
  last_ = now;
}

std::string phase_marks::text() const {
  std::string out;
  char number[32];
  for (const auto& [phase, ms] : phases_) {
    std::snprintf(number, sizeof(number), " %.3f", ms);
    out += (out.empty() ? "" : ", ") + std::string(phase) + number;
  }
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}


std::string csv_header(const std::vector<std::string>& metrics) {
  std::string header =
      "launch,kernel,device,grid,block,passes_asked,passes_run,footprint_bytes,bytes_moved,snapshot_ms,"
      "restore_ms,kernel_ms,extra_pass_ms,replayed,reason,verify,digested_bytes,write_set_misses,graph_mode,"
      "graph_launch,graph_node,replay_ms,counter_pass_ms,counter_setup_ms";
  if (!metrics.empty()) {
    header += ",counters";
    for (const std::string& metric : metrics) {
      header += "," + metric;  // metric names are letters, digits, '_', '.' and ':' (parse_metric_list)
    }
  }
  return header + "\n";
}

std::string csv_row(const launch_row_t& r, size_t metrics, double replay_ms) {
  std::string counted;
  if (metrics != 0) {
    counted = "," + quoted(r.counters);
    for (size_t i = 0; i < metrics; ++i) {
      counted += "," + (i < r.metrics.size() ? shortest(r.metrics[i]) : std::string());
    }
  }
  char shape[160];
  std::snprintf(shape, sizeof(shape), "%d,%ux%ux%u,%ux%ux%u,%" PRIu32 ",%" PRIu32 ",%zu,%zu,", r.device, r.grid[0],
                r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.passes_asked, r.passes_run,
                r.footprint_bytes, r.bytes_moved);
  return std::to_string(r.index) + "," + quoted(r.kernel) + "," + shape + fixed4(r.snapshot_ms) + "," +
         fixed4(r.restore_ms) + "," + fixed4(r.kernel_ms) + "," + fixed4(r.extra_pass_ms) + "," +
         (r.replayed ? "1," : "0,") + quoted(r.reason) + "," + quoted(r.verify) + "," +
         std::to_string(r.digested_bytes) + "," + std::to_string(r.write_set_misses) + "," + quoted(r.graph_mode) +
         "," + index_or_empty(r.graph_launch) + "," + index_or_empty(r.graph_node) + "," + fixed4(replay_ms) + "," +
         fixed4(r.counter_pass_ms) + "," + fixed4(r.counter_setup_ms) + counted + "\n";
}

std::string decline_text(kreplay_decline_reason_t reason) {
  static constexpr const char* names[] = {
      "NONE",          "NOT_CONFIGURED",   "FINALIZED",     "METADATA_MEMORY",       "STAGING_MEMORY",
      "COPY_FAILED",   "MODULE_SCAN_INCOMPLETE", "INVENTORY_OVERFLOW", "HOST_BUDGET", "COPIES_IN_FLIGHT",
      "UNTRACKED_MEMORY", "OVER_COST",     "WINDOW_NESTED",
  };
  const auto index = static_cast<size_t>(reason);
  const std::string name = index < sizeof(names) / sizeof(names[0]) ? names[index] : std::to_string(index);
  return name + " (" + kreplay_decline_reason_string(reason) + ")";
}

std::string write_set_verdict(const launch_row_t& row) {
  return "differs: write set missed " + std::to_string(row.write_set_misses) + " blocks from pass " +
         std::to_string(row.write_set_miss_pass);
}

std::string report_path(const std::string& output, uint64_t launcher_pid, uint64_t pid) {
  if (output.empty() || launcher_pid == 0 || launcher_pid == pid) {
    return output;
  }
  const size_t dot = output.rfind('.');
  const size_t slash = output.rfind('/');
  const std::string suffix = "." + std::to_string(pid);
  return dot != std::string::npos && (slash == std::string::npos || dot > slash)
             ? output.substr(0, dot) + suffix + output.substr(dot)
             : output + suffix;
}

replay_report::replay_report(const replay_config_t& config, const char* backend, std::vector<std::string> metrics)
    : config_(config),
      backend_(backend),
      metrics_(std::move(metrics)),
      summary_(metrics_.empty() ? nullptr : std::make_unique<counter_summary>(metrics_)),
      started_(replay_clock::now()),
      last_progress_(started_) {}

replay_report::~replay_report() = default;

bool replay_report::open(std::string* why) {
  config_.output = report_path(config_.output, config_.launcher_pid, static_cast<uint64_t>(getpid()));
  if (config_.output.empty()) {
    return true;
  }
  csv_ = std::fopen(config_.output.c_str(), "w");
  if (csv_ == nullptr) {
    *why = "cannot write the report " + config_.output + ": " + std::strerror(errno);
    return false;
  }
  std::fputs(csv_header(metrics_).c_str(), csv_);
  std::fflush(csv_);
  return true;
}

void replay_report::add(const launch_row_t& row, double replay_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  counted_ += !row.metrics.empty() ? 1 : 0;
  if (summary_ != nullptr) {
    summary_->add(row);
  }
  if (row.holds_nodes && row.reason.empty()) {
    ++graphs_by_node_;  // its kernel nodes have their rows (and counts)
  } else if (row.replayed) {
    ++replayed_;
  } else {
    ++declined_[row.reason.substr(0, row.reason.find(':'))];
  }
  if (row.verify.rfind("differs", 0) == 0) {
    ++differed_;
    write_set_missed_ += row.write_set_misses > 0 ? 1 : 0;
    log(KREPLAY_LOG_WARNING, "launch %" PRIu64 " (%s): %s", row.index, row.kernel.c_str(), row.verify.c_str());
  }
  replay_ms_ += replay_ms;
  if (csv_ != nullptr && !finished_) {
    std::fputs(csv_row(row, metrics_.size(), replay_ms).c_str(), csv_);
    std::fflush(csv_);
  }
  progress_locked(replay_clock::now());
}

uint64_t replay_report::declined_locked() const {
  uint64_t declined = 0;
  for (const auto& [why, count] : declined_) {
    declined += count;
  }
  return declined;
}

void replay_report::progress_locked(replay_clock::time_point now) {
  if (config_.progress_seconds <= 0 || ms_between(last_progress_, now) < config_.progress_seconds * 1e3) {
    return;
  }
  last_progress_ = now;
  const uint64_t declined = declined_locked();
  std::fprintf(stderr, "kreplay-cuda-replay: %.1f s: %" PRIu64 " launches, %" PRIu64 " replayed, %" PRIu64
               " run once, %.1f s replaying\n",
               ms_between(started_, now) / 1e3, replayed_ + declined, replayed_, declined, replay_ms_ / 1e3);
}

void replay_report::range_ended(const std::string& why, size_t launches) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++ranges_ended_[why];
  range_launches_ += launches;
}

void replay_report::finish(int64_t in_flight) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) {
    return;
  }
  finished_ = true;
  const double total_ms = ms_between(started_, replay_clock::now());
  const uint64_t declined = declined_locked();
  std::fprintf(stderr,
               "kreplay-cuda-replay: %" PRIu64 " launches: %" PRIu64 " replayed (%s%u passes, backend %s), %" PRIu64
               " run once; %.3f s replaying, %.3f s the program's own (of %.3f s)",
               replayed_ + declined, replayed_, metrics_.empty() ? "" : "at least ", config_.passes, backend_,
               declined, replay_ms_ / 1e3,
               (total_ms - replay_ms_) / 1e3, total_ms / 1e3);
  if (config_.verify) {
    std::fprintf(stderr, "; verify: %" PRIu64 " launches whose passes differed", differed_);
  }
  if (!metrics_.empty()) {
    std::fprintf(stderr, "; counters: %" PRIu64 " launches counted (%zu metrics)", counted_, metrics_.size());
  }
  if (graphs_by_node_ > 0) {
    // Their kernel nodes are among the launches above, one row each.
    std::fprintf(stderr, "; graphs: %" PRIu64 " launches replayed node by node", graphs_by_node_);
  }
  if (write_set_missed_ > 0) {
    // Their results are exact (the full check restored the missed blocks); some of their passes may not be.
    std::fprintf(stderr, "; write set: %" PRIu64 " launches with misses", write_set_missed_);
  }
  if (in_flight > 0) {
    // The program ended while other threads were inside launches: those have no row.
    std::fprintf(stderr, "; %" PRId64 " launches still in progress at exit (no row)", in_flight);
  }
  std::fputs("\n", stderr);
  for (const auto& [why, count] : declined_) {
    std::fprintf(stderr, "kreplay-cuda-replay:   run once: %" PRIu64 " x %s\n", count, why.c_str());
  }
  uint64_t ranges = 0;
  for (const auto& [why, count] : ranges_ended_) {
    ranges += count;
  }
  if (ranges > 0) {
    std::fprintf(stderr, "kreplay-cuda-replay:   ranges: %" PRIu64 " of %.1f launches on average, ended by:", ranges,
                 static_cast<double>(range_launches_) / static_cast<double>(ranges));
    const char* separator = "";
    for (const auto& [why, count] : ranges_ended_) {
      std::fprintf(stderr, "%s %" PRIu64 " x %s", separator, count, why.c_str());
      separator = ";";
    }
    std::fputs("\n", stderr);
  }
  if (summary_ != nullptr) {
    std::fputs(summary_->text(10).c_str(), stderr);
  }
  if (csv_ != nullptr) {
    std::fclose(csv_);
    csv_ = nullptr;
  }
}

}  // namespace kreplay::cuda::inject

// Metric lists for the counters (counters.hpp).
#include "replay/counters.hpp"

namespace kreplay::cuda::inject {

bool parse_metric_list(const std::string& text, std::vector<std::string>* out, std::string* why) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    const std::string name = text.substr(start, end - start);
    if (name.empty()) {
      *why = "an empty metric name in \"" + text + "\"";
      return false;
    }
    for (char c : name) {
      const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                           c == '.' || c == ':';
      if (!allowed) {
        *why = "the metric name \"" + name + "\" has a character no metric name has ('" + std::string(1, c) + "')";
        return false;
      }
    }
    out->push_back(name);
    start = end + 1;
  }
  return true;
}

}  // namespace kreplay::cuda::inject

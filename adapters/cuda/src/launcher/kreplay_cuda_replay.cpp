// kreplay-cuda-replay: runs a program with kreplay's CUDA injection library loaded by the driver and every
// selected kernel launch replayed (adapters/cuda/README.md, "kreplay-cuda-replay"). The options become the
// library's KREPLAY_REPLAY_* environment, checked here with the library's own parser before the program
// starts; the library is found relative to this executable (lib/ beside bin/ once installed, the same folder
// in the build tree).
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "replay_config.hpp"

namespace {

using kreplay::cuda::inject::parse_replay_config;
using kreplay::cuda::inject::replay_config_t;

constexpr const char* library_name = "libkreplay_cuda_inject.so";

struct option_t {
  const char* name;      // without the leading "--"
  const char* variable;  // the library's environment variable
  const char* value;     // what the value is, for --help ("" for a flag)
  const char* help;
};

constexpr option_t options[] = {
    {"passes", "KREPLAY_REPLAY_PASSES", "N", "passes per replayed launch, 1 to 1000 (default 5)"},
    {"kernel-name", "KREPLAY_REPLAY_KERNEL_NAME", "REGEX", "replay only kernels whose name matches (ECMAScript, "
                                                            "searched anywhere in the mangled name)"},
    {"launch-skip", "KREPLAY_REPLAY_LAUNCH_SKIP", "N", "run the first N matching launches once (default 0)"},
    {"launch-count", "KREPLAY_REPLAY_LAUNCH_COUNT", "N", "replay at most N matching launches (default: all)"},
    {"tier", "KREPLAY_REPLAY_TIER", "host|device|auto",
     "where snapshots live: host staging (default), device memory (spilling to host past the budget), or "
     "auto (at most half of the free device memory at each capture, the rest on the host)"},
    {"dirty-only", "KREPLAY_REPLAY_DIRTY_ONLY", "on|off", "restore and re-capture only changed blocks (default on)"},
    {"device-budget", "KREPLAY_REPLAY_DEVICE_BUDGET", "BYTES", "device memory snapshots may hold (K, M, G)"},
    {"verify", "KREPLAY_REPLAY_VERIFY", "", "compare every pass's footprint with pass 1's (block digests)"},
    {"backend", "KREPLAY_REPLAY_BACKEND", "kreplay|cupti",
     "kreplay (default), or CUPTI's Checkpoint API (device memory) for a side-by-side measurement"},
    {"exclude", "KREPLAY_REPLAY_EXCLUDE", "REGEX",
     "kernels never replayed, run once (default: nccl|nvshmem, communication kernels hang under replay; \"\" "
     "excludes nothing)"},
    {"progress", "KREPLAY_REPLAY_PROGRESS", "SECONDS", "seconds between progress lines on stderr (default 5, 0 none)"},
    {"debug-no-restore", "KREPLAY_REPLAY_RESTORE", "",
     "debug: relaunch without restoring (results then differ: the control of a correctness test)"},
};

void usage(FILE* to) {
  std::fprintf(to,
               "usage: kreplay-cuda-replay [options] [-o report.csv] -- program [arguments...]\n\n"
               "Runs the program with kreplay's CUDA injection library and replays every selected kernel launch:\n"
               "snapshot before the launch, then for each further pass restore and relaunch. The program's results\n"
               "are those of the last pass. One CSV row per launch (-o), a summary on stderr.\n\noptions:\n");
  for (const option_t& option : options) {
    std::string left = std::string("--") + option.name + (*option.value != '\0' ? std::string(" ") + option.value : "");
    std::fprintf(to, "  %-32s %s\n", left.c_str(), option.help);
  }
  std::fprintf(to, "  %-32s %s\n", "-o, --output FILE", "the CSV report, one row per launch");
  std::fprintf(to, "  %-32s %s\n", "-h, --help", "this text");
  std::fprintf(to,
               "\nEnvironment: KREPLAY_INJECT_LOG=warning|info|trace (the library's messages), KREPLAY_CUPTI_PATH\n"
               "(a libcupti.so.13 when the program brings none), KREPLAY_CHECKPOINT_PATH (libcheckpoint.so for\n"
               "--backend cupti). Only one CUPTI subscriber is allowed per process: PyTorch's profiler, Nsight\n"
               "Systems and Nsight Compute record nothing in a program run under kreplay-cuda-replay.\n");
}

// The folder of this executable, from /proc/self/exe.
std::string own_folder() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) {
    return ".";
  }
  path[length] = '\0';
  std::string text = path;
  return text.substr(0, text.rfind('/'));
}

// The library's folder relative to the launcher's once installed (CMake's libdir against its bindir: "../lib",
// or "../lib/x86_64-linux-gnu" on Debian with the prefix /usr), else beside it (the build tree).
#ifndef KREPLAY_LIBDIR_FROM_BINDIR
#define KREPLAY_LIBDIR_FROM_BINDIR "../lib"
#endif

// `file` made absolute against the launcher's working directory: the library opens it at cuInit, in whatever
// directory the program has moved to by then.
std::string absolute(const std::string& file) {
  if (file.front() == '/') {
    return file;
  }
  char here[PATH_MAX];
  return getcwd(here, sizeof(here)) != nullptr ? std::string(here) + "/" + file : file;
}

std::string find_library() {
  const std::string folder = own_folder();
  for (const std::string& candidate : {folder + "/" KREPLAY_LIBDIR_FROM_BINDIR "/" + library_name,
                                       folder + "/../lib/" + library_name, folder + "/" + library_name}) {
    if (access(candidate.c_str(), R_OK) == 0) {
      char resolved[PATH_MAX];
      return realpath(candidate.c_str(), resolved) != nullptr ? std::string(resolved) : candidate;
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> environment{{"KREPLAY_REPLAY", "1"}};
  int first = argc;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      first = i + 1;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (arg == "-o" || arg == "--output" || arg.rfind("--output=", 0) == 0 || (arg.rfind("-o", 0) == 0 && arg.size() > 2)) {
      std::string file;
      if (arg == "-o" || arg == "--output") {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "kreplay-cuda-replay: %s needs a file name\n", arg.c_str());
          return 2;
        }
        file = argv[++i];
      } else {
        file = arg.substr(arg[1] == 'o' ? 2 : std::strlen("--output="));
      }
      if (file.empty()) {
        std::fprintf(stderr, "kreplay-cuda-replay: %s: the report's file name is empty\n", arg.c_str());
        return 2;
      }
      environment["KREPLAY_REPLAY_OUTPUT"] = absolute(file);
      continue;
    }
    const option_t* found = nullptr;
    std::string value;
    bool has_value = false;  // written as --name=value
    for (const option_t& option : options) {
      const std::string flag = std::string("--") + option.name;
      if (arg == flag) {
        found = &option;
      } else if (arg.rfind(flag + "=", 0) == 0) {
        found = &option;
        value = arg.substr(flag.size() + 1);
        has_value = true;
      }
    }
    if (found == nullptr) {
      if (arg.rfind("-", 0) != 0) {
        first = i;  // the program, without a "--" before it
        break;
      }
      std::fprintf(stderr, "kreplay-cuda-replay: unknown option %s (see --help)\n", arg.c_str());
      return 2;
    }
    if (*found->value == '\0') {
      if (has_value) {
        std::fprintf(stderr, "kreplay-cuda-replay: --%s takes no value\n", found->name);
        return 2;
      }
      value = std::strcmp(found->variable, "KREPLAY_REPLAY_RESTORE") == 0 ? "0" : "1";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kreplay-cuda-replay: --%s needs a value (%s)\n", found->name, found->value);
        return 2;
      }
      value = argv[++i];
    }
    // An empty value would silently mean the default; only --exclude '' means something (exclude nothing).
    if (value.empty() && std::strcmp(found->variable, "KREPLAY_REPLAY_EXCLUDE") != 0) {
      std::fprintf(stderr, "kreplay-cuda-replay: --%s: the value is empty (%s)\n", found->name, found->value);
      return 2;
    }
    environment[found->variable] = value;
  }
  if (first >= argc) {
    std::fprintf(stderr, "kreplay-cuda-replay: no program given\n\n");
    usage(stderr);
    return 2;
  }
  // The library's own parser: a malformed value is refused here, before the program starts.
  replay_config_t config;
  std::string error;
  auto get = [&](const char* name) -> const char* {
    const auto it = environment.find(name);
    return it != environment.end() ? it->second.c_str() : nullptr;
  };
  if (!parse_replay_config(get, &config, &error)) {
    std::fprintf(stderr, "kreplay-cuda-replay: %s\n", error.c_str());
    return 2;
  }
  const std::string library = find_library();
  if (library.empty()) {
    std::fprintf(stderr, "kreplay-cuda-replay: %s is not in %s/../lib or beside the launcher\n", library_name,
                 own_folder().c_str());
    return 2;
  }
  if (const char* other = std::getenv("CUDA_INJECTION64_PATH"); other != nullptr && library != other) {
    std::fprintf(stderr, "kreplay-cuda-replay: CUDA_INJECTION64_PATH=%s is replaced by %s (one injection library "
                 "per process)\n", other, library.c_str());
  }
  environment["CUDA_INJECTION64_PATH"] = library;
  // The program keeps this process's id across exec: the library tells the program from its children (a child
  // that inherits the environment writes a report of its own, report.<pid>.csv, instead of truncating this one).
  environment["KREPLAY_REPLAY_PID"] = std::to_string(getpid());
  // A caller's KREPLAY_INJECT_TRACKING=0 would turn the whole injection off, the replay with it.
  environment["KREPLAY_INJECT_TRACKING"] = "1";
  // The options given are the whole configuration: a KREPLAY_REPLAY_* left in the caller's environment from
  // another run does not leak into this one.
  for (const option_t& option : options) {
    if (environment.count(option.variable) == 0) {
      unsetenv(option.variable);
    }
  }
  if (environment.count("KREPLAY_REPLAY_OUTPUT") == 0) {
    unsetenv("KREPLAY_REPLAY_OUTPUT");
  }
  for (const auto& [name, value] : environment) {
    if (setenv(name.c_str(), value.c_str(), 1) != 0) {
      std::fprintf(stderr, "kreplay-cuda-replay: setenv(%s): %s\n", name.c_str(), std::strerror(errno));
      return 2;
    }
  }
  execvp(argv[first], argv + first);
  std::fprintf(stderr, "kreplay-cuda-replay: cannot run %s: %s\n", argv[first], std::strerror(errno));
  return 127;
}

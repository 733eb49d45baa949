// kreplay-cuda-replay: runs a program with kreplay's CUDA injection library loaded by the driver and every
// selected kernel launch replayed (adapters/cuda/README.md, "kreplay-cuda-replay"). The options become the
// library's KREPLAY_REPLAY_* environment, checked here with the library's own parser before the program
// starts; the library is found relative to this executable (lib/ beside bin/ once installed, the same folder
// in the build tree).
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "kreplay.h"
#include "replay_config.hpp"

namespace {

using kreplay::cuda::inject::option_kind;
using kreplay::cuda::inject::replay_config_t;
using kreplay::cuda::inject::replay_option_t;

constexpr const char* library_name = "libkreplay_cuda_inject.so";

// What the command line asks for: the library's environment and where the program's arguments start.
struct command_t {
  std::map<std::string, std::string> environment;
  int first = 0;
};

void usage(FILE* to) {
  std::fprintf(to,
               "usage: kreplay-cuda-replay [options] [-o report.csv] -- program [arguments...]\n\n"
               "Runs the program with kreplay's CUDA injection library and replays every selected kernel launch:\n"
               "snapshot before the launch, then for each further pass restore and relaunch. The program's results\n"
               "are those of the last pass. One CSV row per launch (-o), a summary on stderr.\n\noptions:\n");
  std::fputs(kreplay::cuda::inject::options_help().c_str(), to);
  std::fprintf(to, "  %-32s %s\n", "--list-metrics[=DEVICE]",
               "the metrics CUPTI knows for the device's chip (default 0), their units and descriptions; no program");
  std::fprintf(to, "  %-32s %s\n", "-h, --help", "this text");
  std::fprintf(to,
               "\nEnvironment: KREPLAY_INJECT_LOG=warning|info|trace (the library's messages), KREPLAY_CUPTI_PATH\n"
               "(a libcupti.so.13 when the program brings none), KREPLAY_CHECKPOINT_PATH (libcheckpoint.so for\n"
               "--%s cupti). Only one CUPTI subscriber is allowed per process: PyTorch's profiler, Nsight\n"
               "Systems and Nsight Compute record nothing in a program run under kreplay-cuda-replay.\n",
               kreplay::cuda::inject::flag_of<&replay_config_t::backend>());
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

// --list-metrics[=DEVICE]: the library, loaded here, lists them (kreplay_inject_list_metrics). The exit status.
int list_metrics(const std::string& arg) {
  const std::string value = arg.size() >= 15 && arg[14] == '=' ? arg.substr(15) : "0";
  char* end = nullptr;
  const long device = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || device < 0 || device > 1024) {
    std::fprintf(stderr, "kreplay-cuda-replay: --list-metrics=%s: a device number (0, 1, ...) expected\n",
                 value.c_str());
    return 2;
  }
  const std::string library = find_library();
  void* handle = library.empty() ? nullptr : dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  using list_t = kreplay_status_t (*)(int, FILE*, FILE*);  // kreplay_inject_list_metrics (kreplay_inject.h)
  auto list = handle != nullptr ? reinterpret_cast<list_t>(dlsym(handle, "kreplay_inject_list_metrics")) : nullptr;
  if (list == nullptr) {
    const char* error = handle == nullptr ? dlerror() : "it has no kreplay_inject_list_metrics";
    std::fprintf(stderr, "kreplay-cuda-replay: --list-metrics: cannot load %s (%s)\n",
                 library.empty() ? library_name : library.c_str(), error != nullptr ? error : "not found");
    return 2;
  }
  return list(static_cast<int>(device), stdout, stderr) == KREPLAY_STATUS_SUCCESS ? 0 : 1;
}

// An option as written: its row, and the value written with it (--flag=value, -xvalue) if any.
struct given_t {
  const replay_option_t* option = nullptr;
  std::string value;
  bool joined = false;
};

// The row `arg` names, as --flag, --flag=value, -x or -xvalue.
given_t find_option(const std::string& arg) {
  for (const replay_option_t& option : kreplay::cuda::inject::replay_options()) {
    if (option.flag == nullptr) {
      continue;
    }
    const std::string flag = std::string("--") + option.flag;
    const bool has_short =
        option.short_flag != '\0' && arg.size() >= 2 && arg[0] == '-' && arg[1] == option.short_flag;
    if (arg == flag || (has_short && arg.size() == 2)) {
      return {&option, "", false};
    }
    if (arg.rfind(flag + "=", 0) == 0) {
      return {&option, arg.substr(flag.size() + 1), true};
    }
    if (has_short) {
      return {&option, arg.substr(2), true};
    }
  }
  return {};
}

// The value of an option (written as `arg`, at argv[*i]) into the environment: 0 to go on, else the exit status.
int take_option(const given_t& given, const std::string& arg, int argc, char** argv, int* i, command_t* out) {
  const replay_option_t& option = *given.option;
  std::string value = given.value;
  const bool joined = given.joined;
  const bool path = option.value.kind == option_kind::path;
  const char* placeholder = kreplay::cuda::inject::value_placeholder(option);
  if (!kreplay::cuda::inject::takes_value(option)) {
    if (joined) {
      std::fprintf(stderr, "kreplay-cuda-replay: --%s takes no value\n", option.flag);
      return 2;
    }
    value = option.value.kind == option_kind::flag_off ? "0" : "1";
  } else if (!joined) {
    if (*i + 1 >= argc) {
      if (path) {
        std::fprintf(stderr, "kreplay-cuda-replay: %s needs a file name\n", arg.c_str());
      } else {
        std::fprintf(stderr, "kreplay-cuda-replay: --%s needs a value (%s)\n", option.flag, placeholder);
      }
      return 2;
    }
    value = argv[++*i];
  }
  // An empty value would silently mean the default; only where "" is a value of its own (--exclude '': exclude
  // nothing) is it taken.
  if (value.empty() && option.value.kind != option_kind::pattern_or_empty) {
    if (path) {
      std::fprintf(stderr, "kreplay-cuda-replay: %s: the report's file name is empty\n", arg.c_str());
    } else {
      std::fprintf(stderr, "kreplay-cuda-replay: --%s: the value is empty (%s)\n", option.flag, placeholder);
    }
    return 2;
  }
  out->environment[option.variable] = path ? absolute(value) : value;
  return 0;
}

// The command line into *out: 0 to go on, else the exit status (--help: 0 after the text, with out->first 0).
int parse_arguments(int argc, char** argv, command_t* out) {
  out->environment[kreplay::cuda::inject::variable_of<&replay_config_t::enabled>()] = "1";
  out->first = argc;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      out->first = i + 1;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      out->first = 0;
      return 0;
    }
    if (arg == "--list-metrics" || arg.rfind("--list-metrics=", 0) == 0) {
      out->first = 0;
      return list_metrics(arg);
    }
    const given_t given = find_option(arg);
    if (given.option == nullptr) {
      if (arg.rfind("-", 0) != 0) {
        out->first = i;  // the program, without a "--" before it
        break;
      }
      std::fprintf(stderr, "kreplay-cuda-replay: unknown option %s (see --help)\n", arg.c_str());
      return 2;
    }
    if (const int status = take_option(given, arg, argc, argv, &i, out); status != 0) {
      return status;
    }
  }
  if (out->first >= argc) {
    std::fprintf(stderr, "kreplay-cuda-replay: no program given\n\n");
    usage(stderr);
    return 2;
  }
  // The library's own parser: a malformed value is refused here, before the program starts.
  replay_config_t config;
  std::string error;
  auto get = [&](const char* name) -> const char* {
    const auto it = out->environment.find(name);
    return it != out->environment.end() ? it->second.c_str() : nullptr;
  };
  if (!kreplay::cuda::inject::parse_replay_config(get, &config, &error)) {
    std::fprintf(stderr, "kreplay-cuda-replay: %s\n", error.c_str());
    return 2;
  }
  return 0;
}

// The library, the process id and tracking into the environment, every other option's variable removed, and
// the whole environment set: 0, else the exit status.
int prepare_environment(command_t* command) {
  std::map<std::string, std::string>& environment = command->environment;
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
  environment[kreplay::cuda::inject::variable_of<&replay_config_t::launcher_pid>()] = std::to_string(getpid());
  // A caller's KREPLAY_INJECT_TRACKING=0 would turn the whole injection off, the replay with it.
  environment["KREPLAY_INJECT_TRACKING"] = "1";
  // The options given are the whole configuration: a variable of the table left in the caller's environment
  // from another run does not leak into this one.
  for (const replay_option_t& option : kreplay::cuda::inject::replay_options()) {
    if (environment.count(option.variable) == 0) {
      unsetenv(option.variable);
    }
  }
  for (const auto& [name, value] : environment) {
    if (setenv(name.c_str(), value.c_str(), 1) != 0) {
      std::fprintf(stderr, "kreplay-cuda-replay: setenv(%s): %s\n", name.c_str(), std::strerror(errno));
      return 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  command_t command;
  if (const int status = parse_arguments(argc, argv, &command); status != 0 || command.first == 0) {
    return status;
  }
  if (const int status = prepare_environment(&command); status != 0) {
    return status;
  }
  execvp(argv[command.first], argv + command.first);
  std::fprintf(stderr, "kreplay-cuda-replay: cannot run %s: %s\n", argv[command.first], std::strerror(errno));
  return 127;
}

// The error check of the replay programs (globals.cu, reset.cu): a runtime or driver API call that does not
// return success ends the program with the call and its code, before any checksum is printed, so a failed
// run can never pass for a replayed one. The programs stay free of kreplay's own headers: they are the
// programs under test, run plain as well as under kreplay-cuda-replay.
#ifndef KREPLAY_REPLAY_PROGRAM_CHECK_HPP
#define KREPLAY_REPLAY_PROGRAM_CHECK_HPP

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    const auto status_ = (call);                                                                             \
    if (status_ != 0) {                                                                                      \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, static_cast<int>(status_)); \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)

#endif  // KREPLAY_REPLAY_PROGRAM_CHECK_HPP

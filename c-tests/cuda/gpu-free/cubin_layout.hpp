// Types shared by the test's CUDA sources and the test itself, so that the test knows each variable's size
// from the same definition nvcc compiled (plain standard-layout types: one layout on host and device).
#pragma once

struct particle_t {
  float position[3];
  float velocity[3];
  int id;
};

struct config_t {
  double scale;
  int steps;
  char tag[12];
};

template <int N>
struct vec_t {
  float v[N];
};

// The number of modules compiled from many.cu (module i defines module_<i>_bytes of (i + 1) * 16 bytes).
#define KREPLAY_MANY_MODULES 12

// Module-scope variables and no kernel: the shape of the cubin a translation unit without kernels gives (its
// variables come from headers), for the injection's GPU-free tests (compiled to a cubin at build time; never run).
// Compiled twice: as is, and with KREPLAY_MORE_VARIABLES, whose set of variables includes the first one's.
__device__ int only_counter;
__device__ float only_table[16] = {1.0f};
#ifdef KREPLAY_MORE_VARIABLES
__constant__ int only_more[8] = {1, 2, 3};
#endif

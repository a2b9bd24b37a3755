// Runs rendered kernel sources on the host, one block at a time, each GPU thread a cooperatively
// scheduled fiber: barriers and warp shuffles are scheduling points, __shared__ is static storage,
// atomics are plain adds. Enough of the device language for the templates' own kernels, so that a
// LaunchPlan's logic (tiling, reductions, workspace use) is checked on a machine without a GPU.
// Pre-included (g++ -include) before a rendered source; it takes the prelude's hiprtc branch.
#pragma once
#define __HIPCC_RTC__ 1
#define KF_HAVE_STDINT 1

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

typedef _Float16 __half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half_rn(float f) { return (__half)f; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
using std::max;
using std::min;

struct dim3 { unsigned x = 1, y = 1, z = 1; };
constexpr int warpSize = 32;

namespace kfemu {

struct Barrier {
  int expected = 0;
  int arrived = 0;
  unsigned phase = 0;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  dim3 tid;
  int linear = 0;
  bool done = false;
  Barrier* waiting = nullptr;
  unsigned wait_phase = 0;
};

struct Warp {
  Barrier bar;
  unsigned char slots[32][8];
};

inline ucontext_t scheduler;
inline Fiber* current = nullptr;
inline dim3 block_index, block_dim, grid_dim;
inline Barrier block_barrier;
inline std::vector<Warp> warps;
inline void (*body)() = nullptr;

inline void wait(Barrier& b) {
  const unsigned phase = b.phase;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.phase;
    return;
  }
  current->waiting = &b;
  current->wait_phase = phase;
  swapcontext(&current->ctx, &scheduler);
}

// An exited thread is no longer waited for (as on the GPU).
inline void drop(Barrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) {
    b.arrived = 0;
    ++b.phase;
  }
}

inline void fiber_main() {
  body();
  current->done = true;
  drop(block_barrier);
  drop(warps[current->linear / warpSize].bar);
}

template <typename... A, std::size_t... I>
void call(void (*kernel)(A...), void** argv, std::index_sequence<I...>) {
  kernel(*static_cast<A*>(argv[I])...);
}

template <typename... A>
int launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block, void** argv) {
  static void (*k)(A...);
  static void** args;
  k = kernel;
  args = argv;
  body = [] { call(k, args, std::index_sequence_for<A...>{}); };
  grid_dim = {grid[0], grid[1], grid[2]};
  block_dim = {block[0], block[1], block[2]};
  const int threads = int(block[0] * block[1] * block[2]);
  std::vector<Fiber> fibers(threads);
  for (auto& f : fibers) f.stack.resize(256 * 1024);
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx) {
        block_index = {bx, by, bz};
        block_barrier = Barrier{threads, 0, 0};
        warps.assign((threads + warpSize - 1) / warpSize, Warp{});
        for (int w = 0; w < int(warps.size()); ++w) warps[w].bar.expected = std::min(warpSize, threads - w * warpSize);
        for (int t = 0; t < threads; ++t) {
          Fiber& f = fibers[t];
          f.linear = t;
          f.tid = {unsigned(t % block[0]), unsigned((t / block[0]) % block[1]), unsigned(t / (block[0] * block[1]))};
          f.done = false;
          f.waiting = nullptr;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.data();
          f.ctx.uc_stack.ss_size = f.stack.size();
          f.ctx.uc_link = &scheduler;
          makecontext(&f.ctx, fiber_main, 0);
        }
        for (int remaining = threads; remaining > 0;) {
          bool progressed = false;
          remaining = 0;
          for (auto& f : fibers) {
            if (f.done) continue;
            if (f.waiting && f.waiting->phase == f.wait_phase) {
              ++remaining;
              continue;
            }
            f.waiting = nullptr;
            current = &f;
            swapcontext(&scheduler, &f.ctx);
            progressed = true;
            if (!f.done) ++remaining;
          }
          if (!progressed && remaining > 0) {
            std::fprintf(stderr, "kernel emulator: deadlock in block (%u,%u,%u)\n", bx, by, bz);
            return 1;
          }
        }
      }
  return 0;
}

}  // namespace kfemu

#define threadIdx (kfemu::current->tid)
#define blockIdx (kfemu::block_index)
#define blockDim (kfemu::block_dim)
#define gridDim (kfemu::grid_dim)

inline void __syncthreads() { kfemu::wait(kfemu::block_barrier); }

template <typename T>
T __shfl_xor(T v, int offset) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  kfemu::Warp& w = kfemu::warps[kfemu::current->linear / warpSize];
  const int lane = kfemu::current->linear % warpSize;
  std::memcpy(w.slots[lane], &v, sizeof(T));
  kfemu::wait(w.bar);
  T r;
  std::memcpy(&r, w.slots[lane ^ offset], sizeof(T));
  kfemu::wait(w.bar);
  return r;
}

inline float atomicAdd(float* p, float v) { const float old = *p; *p = old + v; return old; }
inline int atomicAdd(int* p, int v) { const int old = *p; *p = old + v; return old; }

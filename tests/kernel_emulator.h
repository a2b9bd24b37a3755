// Runs rendered kernel sources on the host, one block at a time, each GPU thread a cooperatively
// scheduled fiber: barriers and warp shuffles are scheduling points, atomics are plain read-modify-writes
// (fibers never interleave between two instructions). Enough of the device language for the templates'
// own kernels, so that a LaunchPlan's logic (tiling, reductions, workspace use) is checked on a machine
// without a GPU. Pre-included (g++ -include) before a rendered source; it takes the prelude's hiprtc branch.
//
// Where a GPU would give garbage or fault, the emulator makes the mistake visible instead:
// - shared memory (static __shared__ arrays and the launch's dynamic buffer) is filled with 0xFF bytes
//   (NaN, -1) before every block, so a read of a value no thread of the block wrote spoils the result;
// - the dynamic buffer is Launch.shared_bytes long and followed by a guard; a write past it fails the launch;
// - a misaligned access (a wide vector load off its natural alignment) stops the launch, as the GPU's
//   misaligned-address fault does (g++ -fsanitize=alignment, handled below);
// - threads run in forward order in even blocks and in reverse order in odd ones, so a missing barrier
//   shows up whichever thread reads the other's data;
// - a shuffle from a lane that does not exist or has exited reads 0xFF bytes; a barrier or shuffle that
//   not every live thread reaches is reported as a deadlock.
#pragma once
#define __HIPCC_RTC__ 1
#define KF_HAVE_STDINT 1

#include <setjmp.h>
#include <ucontext.h>

// C headers and <utility> only: the heavier C++ headers would double every instance's compile time.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
// Static shared arrays live in one section of the library, so the launcher can poison them per block.
// `extern __shared__ T name[];` (dynamic shared memory) is rewritten by kernel_emulator.py into a
// pointer to kfemu::dynamic_shared, since `extern static` cannot be spelled.
#define __shared__ static __attribute__((section("kfemu_shared")))

typedef _Float16 __half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half_rn(float f) { return (__half)f; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
template <typename T> inline T max(T a, T b) { return a < b ? b : a; }
template <typename T> inline T min(T a, T b) { return b < a ? b : a; }

struct dim3 { unsigned x = 1, y = 1, z = 1; };
constexpr int warpSize = 32;

extern "C" {
extern unsigned char __start_kfemu_shared[] __attribute__((weak, visibility("hidden")));
extern unsigned char __stop_kfemu_shared[] __attribute__((weak, visibility("hidden")));
}

namespace kfemu {

// Launch outcomes (emu_<kernel> return values; kernel_emulator.py names them).
enum Status { OK = 0, DEADLOCK = 1, MISALIGNED = 2, SHARED_OVERRUN = 3 };

constexpr unsigned char POISON = 0xFF;
constexpr unsigned char GUARD = 0xFE;
constexpr std::size_t GUARD_BYTES = 64 * 1024;  // after the dynamic buffer: an overrun is caught, not heap damage
constexpr std::size_t STACK_BYTES = 256 * 1024;

struct Barrier {
  int expected = 0;
  int arrived = 0;
  unsigned phase = 0;
};

struct Fiber {
  jmp_buf ctx;
  ucontext_t boot;
  char* stack = nullptr;
  dim3 tid;
  int linear = 0;
  bool started = false;
  bool done = false;
  Barrier* waiting = nullptr;
  unsigned wait_phase = 0;
};

struct Warp {
  Barrier bar;
  unsigned char slots[32][8];
};

inline jmp_buf scheduler;
inline jmp_buf fault;  // where a faulting access abandons the launch
inline Fiber* current = nullptr;
inline dim3 block_index, block_dim, grid_dim;
inline Barrier block_barrier;
inline Warp* warps = nullptr;
inline void (*body)() = nullptr;
inline unsigned char* dynamic_shared = nullptr;
inline char message[512];

inline void yield() {
  if (!_setjmp(current->ctx)) _longjmp(scheduler, 1);
}

inline void wait(Barrier& b) {
  const unsigned phase = b.phase;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.phase;
    return;
  }
  current->waiting = &b;
  current->wait_phase = phase;
  yield();
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
  Warp& w = warps[current->linear / warpSize];
  std::memset(w.slots[current->linear % warpSize], POISON, sizeof w.slots[0]);
  drop(w.bar);
  _longjmp(scheduler, 1);  // never returns: the fiber's stack is reset for the next block
}

[[noreturn]] inline void abandon(Status status) { _longjmp(fault, status); }

inline void poison_static_shared() {
  if (__start_kfemu_shared != nullptr && __stop_kfemu_shared != nullptr)
    std::memset(__start_kfemu_shared, POISON, std::size_t(__stop_kfemu_shared - __start_kfemu_shared));
}

template <typename... A, std::size_t... I>
void call(void (*kernel)(A...), void** argv, std::index_sequence<I...>) {
  kernel(*static_cast<A*>(argv[I])...);
}

// Runs one block; false on a deadlock (message filled in).
inline bool run_block(Fiber* fibers, int threads, bool reverse) {
  for (int remaining = threads; remaining > 0;) {
    bool progressed = false;
    remaining = 0;
    for (int i = 0; i < threads; ++i) {
      Fiber& f = fibers[reverse ? threads - 1 - i : i];
      if (f.done) continue;
      if (f.waiting && f.waiting->phase == f.wait_phase) {
        ++remaining;
        continue;
      }
      f.waiting = nullptr;
      current = &f;
      if (!_setjmp(scheduler)) {
        if (f.started) _longjmp(f.ctx, 1);
        f.started = true;
        setcontext(&f.boot);
      }
      progressed = true;
      if (!f.done) ++remaining;
    }
    if (!progressed && remaining > 0) {
      int at_block = 0, at_warp = 0, at_mbarrier = 0;
      for (int i = 0; i < threads; ++i) {
        if (fibers[i].done) continue;
        const Barrier* w = fibers[i].waiting;
        bool warp_bar = false;
        for (int k = 0; k <= (threads - 1) / warpSize; ++k) warp_bar |= w == &warps[k].bar;
        (w == &block_barrier ? at_block : warp_bar ? at_warp : at_mbarrier)++;
      }
      std::snprintf(message, sizeof message,
                    "deadlock in block (%u,%u,%u): %d threads wait at __syncthreads, %d at a warp shuffle, "
                    "%d at a shared-memory barrier",
                    block_index.x, block_index.y, block_index.z, at_block, at_warp, at_mbarrier);
      return false;
    }
  }
  return true;
}

// What one launch allocates, released however the launch ends.
struct Storage {
  int threads, warp_count;
  Fiber* fibers;
  Warp* warp_array;
  unsigned char* shared;
  Storage(int threads_, unsigned shared_bytes)
      : threads(threads_), warp_count((threads_ + warpSize - 1) / warpSize), fibers(new Fiber[threads_]),
        warp_array(new Warp[warp_count]), shared(new unsigned char[shared_bytes + GUARD_BYTES + 16]) {
    for (int t = 0; t < threads; ++t) fibers[t].stack = new char[STACK_BYTES];
  }
  ~Storage() {
    for (int t = 0; t < threads; ++t) delete[] fibers[t].stack;
    delete[] fibers;
    delete[] warp_array;
    delete[] shared;
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

template <typename... A>
int launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block, unsigned shared_bytes, void** argv) {
  static void (*k)(A...);
  static void** args;
  k = kernel;
  args = argv;
  message[0] = 0;
  body = [] { call(k, args, std::index_sequence_for<A...>{}); };
  grid_dim = {grid[0], grid[1], grid[2]};
  block_dim = {block[0], block[1], block[2]};
  const int threads = int(block[0] * block[1] * block[2]);
  Storage storage(threads, shared_bytes);
  Fiber* fibers = storage.fibers;
  warps = storage.warp_array;
  // Dynamic shared memory: 16-byte aligned as on the GPU, a guard after it.
  dynamic_shared = storage.shared + (16 - reinterpret_cast<std::uintptr_t>(storage.shared) % 16) % 16;
  ucontext_t proto;
  getcontext(&proto);
  if (const int status = _setjmp(fault)) return status;
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx) {
        block_index = {bx, by, bz};
        block_barrier = Barrier{threads, 0, 0};
        for (int w = 0; w < storage.warp_count; ++w) {
          warps[w].bar = Barrier{min(warpSize, threads - w * warpSize), 0, 0};
          std::memset(warps[w].slots, POISON, sizeof warps[w].slots);
        }
        poison_static_shared();
        std::memset(dynamic_shared, POISON, shared_bytes);
        std::memset(dynamic_shared + shared_bytes, GUARD, GUARD_BYTES);
        for (int t = 0; t < threads; ++t) {
          Fiber& f = fibers[t];
          f.linear = t;
          f.tid = {unsigned(t % block[0]), unsigned((t / block[0]) % block[1]), unsigned(t / (block[0] * block[1]))};
          f.started = false;
          f.done = false;
          f.waiting = nullptr;
          f.boot = proto;
          f.boot.uc_stack.ss_sp = f.stack;
          f.boot.uc_stack.ss_size = STACK_BYTES;
          f.boot.uc_link = nullptr;
          makecontext(&f.boot, fiber_main, 0);
        }
        if (!run_block(fibers, threads, (bx + by + bz) % 2 == 1)) return DEADLOCK;
        for (std::size_t i = 0; i < GUARD_BYTES; ++i) {
          if (dynamic_shared[shared_bytes + i] != GUARD) [[unlikely]] {
            std::snprintf(message, sizeof message,
                          "block (%u,%u,%u) wrote dynamic shared memory at byte %zu, past the launch's %u bytes",
                          bx, by, bz, shared_bytes + i, shared_bytes);
            return SHARED_OVERRUN;
          }
        }
      }
  return OK;
}

}  // namespace kfemu

// g++ -fsanitize=alignment -fno-sanitize-recover=alignment calls this before a misaligned access; the GPU
// faults there, so the launch is abandoned. (Layouts from GCC's libsanitizer, ubsan_handlers.h.)
struct kfemu_source_location { const char* file; unsigned line, column; };
struct kfemu_type_descriptor { unsigned short kind, info; char name[1]; };
struct kfemu_type_mismatch { kfemu_source_location loc; const kfemu_type_descriptor* type; unsigned char log_alignment; unsigned char kind; };

extern "C" [[noreturn]] void __ubsan_handle_type_mismatch_v1_abort(kfemu_type_mismatch* data, std::uintptr_t ptr) {
  const kfemu::Fiber* f = kfemu::current;
  std::snprintf(kfemu::message, sizeof kfemu::message,
                "misaligned access: %s at %p needs %u-byte alignment (source line %u; block (%u,%u,%u), thread (%u,%u,%u))",
                data->type->name, reinterpret_cast<void*>(ptr), 1u << data->log_alignment, data->loc.line,
                kfemu::block_index.x, kfemu::block_index.y, kfemu::block_index.z,
                f ? f->tid.x : 0u, f ? f->tid.y : 0u, f ? f->tid.z : 0u);
  kfemu::abandon(kfemu::MISALIGNED);
}

#define threadIdx (kfemu::current->tid)
#define blockIdx (kfemu::block_index)
#define blockDim (kfemu::block_dim)
#define gridDim (kfemu::grid_dim)

inline void __syncthreads() { kfemu::wait(kfemu::block_barrier); }
// The warp's live lanes meet, as at a shuffle.
inline void __syncwarp(unsigned = 0xffffffffu) { kfemu::wait(kfemu::warps[kfemu::current->linear / warpSize].bar); }

// Every live lane of the warp publishes its value, then reads its partner's: a lane that does not take
// part (a divergent shuffle) leaves the others waiting, which is reported as a deadlock.
template <typename T>
T __shfl_xor(T v, int offset) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  kfemu::Warp& w = kfemu::warps[kfemu::current->linear / warpSize];
  const int lane = kfemu::current->linear % warpSize;
  std::memcpy(w.slots[lane], &v, sizeof(T));
  kfemu::wait(w.bar);
  T r;
  std::memcpy(&r, w.slots[(lane ^ offset) % warpSize], sizeof(T));
  kfemu::wait(w.bar);
  return r;
}

// Shared-memory barriers of common/tma.h (mbarrier): a barrier completes a phase when its arrivals are in;
// a thread waiting for a phase of some parity sleeps until the phase moves on (a copy is done when issued,
// so its bytes need no counting). The record sits in the 16 bytes the template gives each barrier.
inline void kfemu_mbarrier_init(void* b, int arrivals) {
  kfemu::Barrier* bar = static_cast<kfemu::Barrier*>(b);
  static_assert(sizeof(kfemu::Barrier) <= 16, "a barrier record fits the template's 16 bytes");
  *bar = kfemu::Barrier{arrivals, 0, 0};
}
inline void kfemu_mbarrier_arrive(void* b) {
  kfemu::Barrier* bar = static_cast<kfemu::Barrier*>(b);
  if (++bar->arrived == bar->expected) {
    bar->arrived = 0;
    ++bar->phase;
  }
}
inline void kfemu_mbarrier_wait(void* b, int parity) {
  kfemu::Barrier* bar = static_cast<kfemu::Barrier*>(b);
  if (bar->phase % 2 != (unsigned)parity) return;  // the phase of this parity has completed
  kfemu::current->waiting = bar;
  kfemu::current->wait_phase = bar->phase;
  kfemu::yield();
}

// One block runs at a time, so every write is already visible to the next.
inline void __threadfence() {}

// Fibers switch only at barriers and shuffles, so a read-modify-write is atomic here.
inline float atomicAdd(float* p, float v) { const float old = *p; *p = old + v; return old; }
inline int atomicAdd(int* p, int v) { const int old = *p; *p = old + v; return old; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned old = *p; *p = old + v; return old; }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old > v ? old : v;
  return old;
}

// Bulk tensor copies (TMA, sm_90) into a pipeline's stages, and the shared-memory barriers (mbarrier) that
// say when a stage has landed and when its readers are done with it.
//
// A copy moves one box of a tensor (its shape, strides and the box's size are in a tensor map the host
// encodes: factory/abi.py) into shared memory, rows of 128 bytes in the 128-byte swizzle (the 16-byte unit u
// of stored row r lands at unit u ^ (r % 8)), which is the layout wgmma.h's tiles have; elements past the
// tensor's edge arrive as zeros. One thread issues the copies of a stage; the copy engine counts the bytes
// into the stage's barrier, and readers wait on the barrier, not on their own copies.
//
// Without sm_90a (the host emulator) the same map holds the emulator's own description of the tensor
// (kf_host_map below, written by tests/kernel_emulator.py), a copy is done at once by the issuing thread,
// and the barriers are the emulator's (kfemu_mbarrier_*).
// Needs prelude.h and mma.h.
#pragma once

// A tensor map (CUtensorMap: 128 opaque bytes), passed to the kernel by value as a __grid_constant__ parameter.
struct alignas(64) kf_tensor_map {
  unsigned long long word[16];
};

namespace kf_tma {

// A barrier's storage: 8 bytes on the GPU, the emulator's barrier record (kfemu_mbarrier) in 16.
struct alignas(16) Bar {
  unsigned long long word[2];
};

#if defined(KF_WGMMA)
__device__ __forceinline__ unsigned address(Bar* b) { return kf_mma::shared_address(b); }

__device__ __forceinline__ void init(Bar* b, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(address(b)), "r"(arrivals) : "memory");
}
// After one thread's inits and before the barrier that lets others use them: visible to the copy engine too.
__device__ __forceinline__ void publish_inits() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void arrive(Bar* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(address(b)) : "memory");
}
// The issuing thread's arrival, announcing the bytes the stage's copies will deliver.
__device__ __forceinline__ void arrive_expecting(Bar* b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(address(b)), "r"(bytes) : "memory");
}
// Until the phase of this parity has completed.
__device__ __forceinline__ void wait(Bar* b, int parity) {
  unsigned done = 0;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(address(b)), "r"(parity) : "memory");
  } while (!done);
}
// Box (x, y, z) of the map's tensor (x innermost, in elements) into shared memory at `dst`, 1024-byte aligned.
template <typename T>
__device__ __forceinline__ void load_box(kf_mma::Smem<T> dst, const kf_tensor_map& map, Bar* b, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, { %3, %4, %5 }], [%2];"
      ::"r"(dst.addr), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(address(b)), "r"(x), "r"(y), "r"(z)
      : "memory");
}
#elif defined(KF_MMA_SYNC)
static_assert(sizeof(Bar) == 0, "bulk tensor copies here compile for sm_90a");
#else
// The emulator's description of a three-dimensional tensor, in the map's bytes.
struct kf_host_map {
  const unsigned char* base;
  unsigned long long dims[3];     // elements
  unsigned long long strides[2];  // bytes between steps of dims 1 and 2
  unsigned box[3];
  unsigned element_bytes;
};

__device__ __forceinline__ void init(Bar* b, int arrivals) { kfemu_mbarrier_init(b, arrivals); }
__device__ __forceinline__ void publish_inits() {}
__device__ __forceinline__ void arrive(Bar* b) { kfemu_mbarrier_arrive(b); }
__device__ __forceinline__ void arrive_expecting(Bar* b, int) { kfemu_mbarrier_arrive(b); }
__device__ __forceinline__ void wait(Bar* b, int parity) { kfemu_mbarrier_wait(b, parity); }
// The copy, done now: rows of the box (y, then z) as 128-byte swizzled rows, zeros past the tensor's edge.
template <typename T>
__device__ __forceinline__ void load_box(kf_mma::Smem<T> dst, const kf_tensor_map& map, Bar*, int x, int y, int z) {
  const kf_host_map& m = *reinterpret_cast<const kf_host_map*>(&map);
  unsigned char* out = reinterpret_cast<unsigned char*>(dst.ptr);
  const unsigned e = m.element_bytes, unit = 16 / e;
  for (unsigned bz = 0; bz < m.box[2]; ++bz)
    for (unsigned by = 0; by < m.box[1]; ++by) {
      const unsigned row = bz * m.box[1] + by;
      for (unsigned bx = 0; bx < m.box[0]; ++bx) {
        const long long gx = (long long)x + bx, gy = (long long)y + by, gz = (long long)z + bz;
        const bool inside = gx >= 0 && gy >= 0 && gz >= 0 && gx < (long long)m.dims[0] &&
                            gy < (long long)m.dims[1] && gz < (long long)m.dims[2];
        unsigned char* to = out + row * 128 + ((bx / unit) ^ (row % 8)) * 16 + bx % unit * e;
        if (inside)
          std::memcpy(to, m.base + gz * m.strides[1] + gy * m.strides[0] + gx * e, e);
        else
          std::memset(to, 0, e);
      }
    }
}
#endif

}  // namespace kf_tma

// The implicit-GEMM engine every conv op plugs into: C(M x N) = sum over r of A(r, m) * B(r, n), where{% set overlap = wgmma_overlap is defined and wgmma_overlap %}
// the op says where a chunk of A or B sits in its tensors and what becomes of each C element.
//
// A block owns a BM x BN tile of C and the reduction rows [r_begin, r_end); WARPS_M x WARPS_N warps
// split the tile; STAGES shared-memory stages keep loads in flight (cp.async on sm_80+) while the
// matrix instructions of kf_mma (mma.h) consume the oldest. Operands are staged the way they are
// contiguous in memory (A_RMAJOR / B_RMAJOR: the reduction index is the tile's row), in chunks of
// VA / VB elements along that contiguous direction.
//
// The op is a class with
//   Pos pos(int r)                              what every chunk of reduction row r shares (its position)
//   ASlot a_slot(int m), BSlot b_slot(int n)    what a thread's chunk of column m / n keeps across stages
//   const T* a_chunk(const ASlot&, const Pos&, bool& ok)   A(r, m) .. the next VA elements along the
//   const T* b_chunk(const BSlot&, const Pos&, bool& ok)   contiguous direction (likewise B with VB);
//                                               ok = false: the chunk is zero
//   CRow c_row(int m), CCol c_col(int n)        where row m / column n of C goes (worked out once per thread)
//   void store(const CRow&, const CCol&, float v)   C(m, n), for every element of the tile, in range or not
// A thread copies the same chunks of every stage's tiles, only r moves, so what depends on m or n alone
// (channel offsets, filter taps, bounds) is worked out once, in the slots. In r-major tiles a thread's
// chunks of A and B all lie on one reduction row, so the op's position of a row is worked out once per
// stage for all of them. Rows r >= r_end are zero without asking the op. Needs prelude.h and mma.h.
#pragma once

#if defined(KF_MMA_SYNC) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KF_WGMMA 1  // sm_90a: warpgroup MMA (wgmma.h)
#endif

namespace kf_igemm {

// A plain type of each chunk size, naturally aligned, so a chunk moves as one load and one store.
template <int BYTES> struct Word;
template <> struct Word<1> { using type = unsigned char; };
template <> struct Word<2> { using type = unsigned short; };
template <> struct Word<4> { using type = unsigned int; };
struct alignas(8) Word8 { unsigned int x[2]; };
struct alignas(16) Word16 { unsigned int x[4]; };
template <> struct Word<8> { using type = Word8; };
template <> struct Word<16> { using type = Word16; };

// Copy `BYTES` from global to shared memory, or zeros when !ok: cp.async (completion by commit/wait
// below) where the target has it and the size allows, else an ordinary load and store.
template <int BYTES, typename T>
__device__ __forceinline__ void copy(kf_mma::Smem<T> dst, const T* src, bool ok) {
  using W = typename Word<BYTES>::type;
#if defined(KF_MMA_SYNC)
  const int n = ok ? BYTES : 0;  // cp.async's src-size: 0 reads nothing and fills zeros
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst.addr), "l"(src), "r"(n));
  } else if constexpr (BYTES == 4 || BYTES == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst.addr), "l"(src), "n"(BYTES), "r"(n));
  } else if constexpr (BYTES == 2) {
    const unsigned short w = ok ? kf_ldg(reinterpret_cast<const unsigned short*>(src)) : (unsigned short)0;
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(dst.addr), "h"(w));
  } else {
    static_assert(BYTES == 1, "chunks of 1, 2, 4, 8 or 16 bytes");
    const unsigned w = ok ? kf_ldg(reinterpret_cast<const unsigned char*>(src)) : 0u;
    asm volatile("st.shared.u8 [%0], %1;" ::"r"(dst.addr), "r"(w));
  }
#else
  const W w = ok ? kf_ldg(reinterpret_cast<const W*>(src)) : W{};
  *reinterpret_cast<W*>(dst.ptr) = w;
#endif
}

__device__ __forceinline__ void commit() {
#if defined(KF_MMA_SYNC)
  asm volatile("cp.async.commit_group;");
#endif
}

template <int PENDING> __device__ __forceinline__ void wait() {
#if defined(KF_MMA_SYNC)
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
#endif
}

template <class Cfg>
__device__ __forceinline__ void compute_stage(kf_mma::Smem<typename Cfg::T> sa, kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN], int wm, int wn);

// Make this thread's copies into shared memory visible to instructions that read it through the async
// proxy (wgmma), before the barrier that hands the stage over.
__device__ __forceinline__ void publish_to_async_proxy() {
#if defined(KF_WGMMA)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// The mma.sync engine's configuration. A configuration says how its tiles lie in shared memory
// (a_at / b_at: the element offset of stored row `row`, column `col`), where a warp's accumulator
// tile starts (warp_origin) and how a stage is multiplied (compute); wgmma.h has another.
template <typename T_, int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, bool A_RMAJOR_,
          bool B_RMAJOR_, int VA_, int VB_>
struct Config {
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr bool A_RMAJOR = A_RMAJOR_, B_RMAJOR = B_RMAJOR_;
  static constexpr int VA = VA_, VB = VB_;
  static constexpr int SLICES = 1, SLICE_THREADS = WARPS_M * WARPS_N * kf_mma::LANES;
  static constexpr int THREADS = SLICE_THREADS;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // a warp's tile
  static constexpr int FM = WTM / kf_mma::M, FN = WTN / kf_mma::N;
  // Rows padded by 16 bytes: ldmatrix's eight row addresses then fall in distinct banks.
  static constexpr int PAD = 16 / (int)sizeof(T);
  static constexpr int A_LD = (A_RMAJOR ? BM : BK) + PAD, A_ROWS = A_RMAJOR ? BK : BM;
  static constexpr int B_LD = (B_RMAJOR ? BN : BK) + PAD, B_ROWS = B_RMAJOR ? BK : BN;
  static constexpr int A_ELEMS = A_ROWS * A_LD, B_ELEMS = B_ROWS * B_LD;
  static constexpr int STAGE = A_ELEMS + B_ELEMS;  // elements
  static constexpr int SMEM_ALIGN = 16;
  static constexpr int SHARED_BYTES = STAGE * STAGES * (int)sizeof(T);
  static constexpr bool ASYNC_PROXY = false;  // whether the matrix instructions read shared memory asynchronously

  __device__ static __forceinline__ int a_at(int row, int col) { return row * A_LD + col; }
  __device__ static __forceinline__ int b_at(int row, int col) { return row * B_LD + col; }
  __device__ static __forceinline__ void warp_origin(int warp, int& wm, int& wn) {
    wm = (warp / WARPS_N) * WTM;
    wn = (warp % WARPS_N) * WTN;
  }
  __device__ static __forceinline__ void compute(kf_mma::Smem<T> s, kf_mma::FragC<T> (&acc)[FM][FN], int wm, int wn) {
    compute_stage<Config>(s, acc, wm, wn);
  }
  static_assert(WTM % kf_mma::M == 0 && WTN % kf_mma::N == 0 && BK % kf_mma::K_OF<T> == 0, "tile vs instruction");
  static_assert((A_RMAJOR ? BM : BK) % VA == 0 && (B_RMAJOR ? BN : BK) % VB == 0, "chunks per row");
};

// The chunks of one operand a thread copies into every stage. An r-major tile (rows are reduction rows)
// gives each reduction row THREADS / BK threads, which take that row's chunks in turn, so all of a
// thread's chunks share its row; other tiles deal chunks out in order and each has its own r.
template <class Cfg, class Slot, bool R_MAJOR, bool IS_A, int ROWS, int PER_ROW>
struct OperandChunks {
  static constexpr int THREADS = Cfg::SLICE_THREADS;  // the threads that fill one pipeline
  static constexpr int TPR = THREADS / Cfg::BK;  // threads per reduction row (r-major)
  static constexpr int TOTAL = ROWS * PER_ROW;
  static constexpr int N = R_MAJOR ? (PER_ROW + TPR - 1) / TPR : (TOTAL + THREADS - 1) / THREADS;
  static constexpr bool ALL_LIVE = R_MAJOR ? PER_ROW % TPR == 0 : TOTAL % THREADS == 0;
  static_assert(!R_MAJOR || THREADS % Cfg::BK == 0, "r-major tiles need whole threads per reduction row");
  Slot slot[N];
  int dst[N], r[N];  // shared-memory element offset; r relative to the stage's first row (not r-major)
  bool live[N];      // the chunk exists (the last round of a thread may have none)

  template <class MakeSlot>
  __device__ __forceinline__ void init(int first, int vec, MakeSlot make) {
    const int tid = threadIdx.x % THREADS;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int row, col;
      if constexpr (R_MAJOR) {
        row = tid / TPR;
        col = tid % TPR + i * TPR;
        live[i] = ALL_LIVE || col < PER_ROW;
      } else {
        const int e = tid + i * THREADS;
        live[i] = ALL_LIVE || e < TOTAL;
        row = (live[i] ? e : 0) / PER_ROW;
        col = (live[i] ? e : 0) % PER_ROW;
      }
      col = min(col, PER_ROW - 1) * vec;
      slot[i] = make(first + (R_MAJOR ? col : row));
      r[i] = R_MAJOR ? row : col;
      dst[i] = IS_A ? Cfg::a_at(row, col) : Cfg::b_at(row, col);
    }
  }
};

template <class Cfg, class Op>
struct Chunks {
  using Pos = decltype(static_cast<const Op*>(nullptr)->pos(0));
  using ASlot = decltype(static_cast<const Op*>(nullptr)->a_slot(0));
  using BSlot = decltype(static_cast<const Op*>(nullptr)->b_slot(0));
  using T = typename Cfg::T;
  OperandChunks<Cfg, ASlot, Cfg::A_RMAJOR, true, Cfg::A_RMAJOR ? Cfg::BK : Cfg::BM, (Cfg::A_RMAJOR ? Cfg::BM : Cfg::BK) / Cfg::VA> a;
  OperandChunks<Cfg, BSlot, Cfg::B_RMAJOR, false, Cfg::B_RMAJOR ? Cfg::BK : Cfg::BN, (Cfg::B_RMAJOR ? Cfg::BN : Cfg::BK) / Cfg::VB> b;
  int row;  // this thread's reduction row in r-major tiles

  __device__ __forceinline__ Chunks(const Op& op, int m0, int n0)
      : row(threadIdx.x % Cfg::SLICE_THREADS / (Cfg::SLICE_THREADS / Cfg::BK)) {
    a.init(m0, Cfg::VA, [&](int m) { return op.a_slot(m); });
    b.init(n0, Cfg::VB, [&](int n) { return op.b_slot(n); });
  }

  // One operand's chunks of a stage: r-major ones at the thread's row (its position given), others each
  // at its own row. `fetch(slot, position, ok)` is the op's a_chunk or b_chunk.
  template <bool R_MAJOR, int V, class Operand, class Fetch>
  __device__ __forceinline__ void load_operand(const Op& op, const Operand& c, kf_mma::Smem<T> s, int r0, int r_end,
                                               bool shared_ok, const Pos& shared_pos, Fetch fetch{% if stage_positions is defined and stage_positions %}, const Pos& stage_pos{% endif %}) const {
#pragma unroll
    for (int i = 0; i < Operand::N; ++i) {
      if (!c.live[i]) continue;
      bool ok;
      const T* src;
      if constexpr (R_MAJOR) {
        ok = shared_ok;
        src = fetch(c.slot[i], shared_pos, ok);
      } else {
        ok = r0 + c.r[i] < r_end;
{%- if stage_positions is defined and stage_positions %}
        // Where the op says a stage's rows share a position (stage_shares_pos), a chunk's is the stage's first
        // row's moved on by its offset (pos_near): no per-chunk pos().
        src = fetch(c.slot[i], op.stage_shares_pos() ? op.pos_near(stage_pos, c.r[i]) : op.pos(r0 + c.r[i]), ok);
{%- else %}
        src = fetch(c.slot[i], op.pos(r0 + c.r[i]), ok);
{%- endif %}
      }
      copy<V * (int)sizeof(T)>(s + c.dst[i], src, ok);
    }
  }

  // Stage tiles of reduction rows [r0, r0 + BK) into `s`.
  __device__ __forceinline__ void load(const Op& op, kf_mma::Smem<T> s, int r0, int r_end) const {
    const kf_mma::Smem<T> sb = s + Cfg::A_ELEMS;
    Pos shared_pos;
    bool shared_ok = false;
    if constexpr (Cfg::A_RMAJOR || Cfg::B_RMAJOR) {
      shared_ok = r0 + row < r_end;
      shared_pos = op.pos(r0 + row);
    }
{%- if stage_positions is defined and stage_positions %}
    const Pos stage_pos = op.pos(r0);
    load_operand<Cfg::A_RMAJOR, Cfg::VA>(op, a, s, r0, r_end, shared_ok, shared_pos,
                                         [&](const auto& slot, const Pos& p, bool& ok) { return op.a_chunk(slot, p, ok); }, stage_pos);
    load_operand<Cfg::B_RMAJOR, Cfg::VB>(op, b, sb, r0, r_end, shared_ok, shared_pos,
                                         [&](const auto& slot, const Pos& p, bool& ok) { return op.b_chunk(slot, p, ok); }, stage_pos);
{%- else %}
    load_operand<Cfg::A_RMAJOR, Cfg::VA>(op, a, s, r0, r_end, shared_ok, shared_pos,
                                         [&](const auto& slot, const Pos& p, bool& ok) { return op.a_chunk(slot, p, ok); });
    load_operand<Cfg::B_RMAJOR, Cfg::VB>(op, b, sb, r0, r_end, shared_ok, shared_pos,
                                         [&](const auto& slot, const Pos& p, bool& ok) { return op.b_chunk(slot, p, ok); });
{%- endif %}
  }
};

template <class Cfg>
__device__ __forceinline__ void compute_stage(kf_mma::Smem<typename Cfg::T> sa, kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN], int wm, int wn) {
  const kf_mma::Smem<typename Cfg::T> sb = sa + Cfg::A_ELEMS;
#pragma unroll
  for (int k = 0; k < Cfg::BK; k += kf_mma::K_OF<typename Cfg::T>) {
    kf_mma::FragA<typename Cfg::T> a[Cfg::FM];
    kf_mma::FragB<typename Cfg::T> b[Cfg::FN];
#pragma unroll
    for (int i = 0; i < Cfg::FM; ++i) kf_mma::load_a<Cfg::A_RMAJOR>(a[i], sa, Cfg::A_LD, wm + i * kf_mma::M, k);
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) kf_mma::load_b<Cfg::B_RMAJOR>(b[j], sb, Cfg::B_LD, wn + j * kf_mma::N, k);
#pragma unroll
    for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) kf_mma::mma<typename Cfg::T>(acc[i][j], a[i], b[j]);
  }
}

// f(accumulator, its index among the thread's FM x FN x C_ELEMS) for each of a thread's accumulators.
template <class Cfg, class F>
__device__ __forceinline__ void for_each_acc(kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN], F f) {
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
      for (int e = 0; e < kf_mma::C_ELEMS; ++e) f(acc[i][j].x[e], (i * Cfg::FN + j) * kf_mma::C_ELEMS + e);
}

// Slices 1.. leave their accumulators in shared memory (the pipelines' space, free once every slice is
// done) and slice 0 adds them to its own; true for the threads that go on to store the tile.
template <class Cfg, typename Acc>
__device__ __forceinline__ bool sum_slices(kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN], Acc* space, int slice, int local) {
  constexpr int PER = Cfg::FM * Cfg::FN * kf_mma::C_ELEMS;  // accumulators per thread
  const auto at = [&](int s, int k) -> Acc& { return space[((s - 1) * PER + k) * Cfg::SLICE_THREADS + local]; };
  wait<0>();
  __syncthreads();  // every slice has finished with its stages
  if (slice > 0) for_each_acc<Cfg>(acc, [&](Acc& v, int k) { at(slice, k) = v; });
  __syncthreads();
  if (slice > 0) return false;
  for (int s = 1; s < Cfg::SLICES; ++s) for_each_acc<Cfg>(acc, [&](Acc& v, int k) { v += at(s, k); });
  return true;
}{% if staged_store is defined and staged_store %}

// The tile through shared memory, then Op::STORE_VEC adjacent columns (16 bytes) a store: a lane's
// accumulators hold two adjacent columns on each of two rows, so storing them where they lie writes
// 4-byte pieces scattered over 8 rows a warp instruction. `tile` (the pipelines' space, free once every
// warp is done with it) holds BM x (BN + 4) accumulators; the op's store_vec(row, column, values)
// writes STORE_VEC values of row `row` from column `column` on (nothing past its edges).
template <class Cfg, class Op, typename Acc>
__device__ __forceinline__ void store_staged(const Op& op, kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN],
                                             Acc* tile, int m0, int n0, int wm, int wn, int lane) {
  constexpr int LD = Cfg::BN + 4, V = Op::STORE_VEC, PER_ROW = Cfg::BN / V;
  static_assert(Cfg::SLICES == 1 && Cfg::BN % V == 0, "one pipeline a block, whole vectors a row");
  wait<0>();
  __syncthreads();  // every warp is done reading the pipelines' stages
  for_each_acc<Cfg>(acc, [&](Acc& v, int k) {  // k = (i * FN + j) * C_ELEMS + e: tile (i, j), element e
    const int i = k / (Cfg::FN * kf_mma::C_ELEMS), j = k / kf_mma::C_ELEMS % Cfg::FN, e = k % kf_mma::C_ELEMS;
    tile[(wm + i * kf_mma::M + kf_mma::c_row(kf_mma::c_row_of(e), lane)) * LD + wn + j * kf_mma::N +
         kf_mma::c_col(kf_mma::c_col_of(e), lane)] = v;
  });
  __syncthreads();
  for (int e = threadIdx.x; e < Cfg::BM * PER_ROW; e += Cfg::THREADS) {
    const int r = e / PER_ROW, c = e % PER_ROW * V;
    op.store_vec(op.c_row(m0 + r), n0 + c, tile + r * LD + c);
  }
}
{% endif %}

// The block's tile (m0, n0) over reduction rows [r_begin, r_end): the main loop, then op.store for every
// element of the tile. `smem` holds Cfg::SHARED_BYTES plus Cfg::SMEM_ALIGN - 16 for aligning it.
//
// A block of Cfg::SLICES slices runs one pipeline per slice (Cfg::SLICE_THREADS threads, their own
// stages): slice s takes the reduction tiles s, s + SLICES, ..., so neighbouring rows are read at the
// same time, and the slices' sums meet in shared memory at the end. More warps share one output tile
// without a split-K pass through global memory. Every slice runs the same number of rounds (the
// barriers are the block's); rows past r_end are zeros.
template <class Cfg, class Op>
__device__ __forceinline__ void run(const Op& op, typename Cfg::T* smem_ptr, int m0, int n0, int r_begin, int r_end) {
  using T = typename Cfg::T;
  const unsigned long long base = reinterpret_cast<unsigned long long>(smem_ptr);
  T* const aligned = reinterpret_cast<T*>((base + Cfg::SMEM_ALIGN - 1) / Cfg::SMEM_ALIGN * Cfg::SMEM_ALIGN);
  const int slice = threadIdx.x / Cfg::SLICE_THREADS, local = threadIdx.x % Cfg::SLICE_THREADS;
  const kf_mma::Smem<T> smem = kf_mma::smem(aligned) + slice * (Cfg::STAGE * Cfg::STAGES);
  const int warp = local / kf_mma::LANES, lane = threadIdx.x % kf_mma::LANES;
  int wm, wn;
  Cfg::warp_origin(warp, wm, wn);
  using Acc = typename kf_mma::FragC<T>::Acc;  // fp32, or int32 for int8 operands
  kf_mma::FragC<T> acc[Cfg::FM][Cfg::FN];
  for_each_acc<Cfg>(acc, [](Acc& v, int) { v = 0; });

  const Chunks<Cfg, Op> chunks(op, m0, n0);
  const int tiles = r_end > r_begin ? (r_end - r_begin + Cfg::BK - 1) / Cfg::BK : 0;
  const int rounds = (tiles + Cfg::SLICES - 1) / Cfg::SLICES;
  const auto first_row = [&](int t) { return r_begin + (t * Cfg::SLICES + slice) * Cfg::BK; };
{% set lead = 2 if overlap else 1 %}#pragma unroll
  for (int t = 0; t < Cfg::STAGES - {{ lead }}; ++t) {
    if (t < rounds) chunks.load(op, smem + t * Cfg::STAGE, first_row(t), r_end);
    commit();
  }
{% if overlap %}  // The matrix instructions of a stage are left running (Cfg::compute waits only for the stage before),
  // so loads run STAGES - 2 stages ahead: the stage being refilled is the one whose instructions every
  // thread has waited for before the barrier.
{% endif %}  for (int t = 0; t < rounds; ++t) {
    wait<Cfg::STAGES - {{ lead + 1 }}>();
    if constexpr (Cfg::ASYNC_PROXY) publish_to_async_proxy();
    __syncthreads();  // stage t is complete for every thread; stage t - {{ lead }} is no longer read
    const int next = t + Cfg::STAGES - {{ lead }};
    if (next < rounds) chunks.load(op, smem + (next % Cfg::STAGES) * Cfg::STAGE, first_row(next), r_end);
    commit();
    Cfg::compute(smem + (t % Cfg::STAGES) * Cfg::STAGE, acc, wm, wn);
  }
{% if overlap %}  Cfg::finish();  // the last stage's instructions
{% endif %}  if constexpr (Cfg::SLICES > 1) {
    if (!sum_slices<Cfg>(acc, reinterpret_cast<Acc*>(aligned), slice, local)) return;
  }{% if staged_store is defined and staged_store %}
  store_staged<Cfg>(op, acc, reinterpret_cast<Acc*>(aligned), m0, n0, wm, wn, lane);
  return;{% endif %}

  // A lane's accumulators cover a few rows and columns of the tile, each many times: the op's mapping of
  // a row and of a column to the output is worked out once per row and per column.
  using CRow = decltype(op.c_row(0));
  using CCol = decltype(op.c_col(0));
  CRow rows[Cfg::FM][kf_mma::C_ROWS];
  CCol cols[Cfg::FN][kf_mma::C_COLS];
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int h = 0; h < kf_mma::C_ROWS; ++h) rows[i][h] = op.c_row(m0 + wm + i * kf_mma::M + kf_mma::c_row(h, lane));
#pragma unroll
  for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
    for (int h = 0; h < kf_mma::C_COLS; ++h) cols[j][h] = op.c_col(n0 + wn + j * kf_mma::N + kf_mma::c_col(h, lane));
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
      for (int e = 0; e < kf_mma::C_ELEMS; ++e)
        op.store(rows[i][kf_mma::c_row_of(e)], cols[j][kf_mma::c_col_of(e)], acc[i][j].x[e]);
}

}  // namespace kf_igemm
